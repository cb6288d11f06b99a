#!/bin/sh
# Installs the C library of fencelock under PREFIX:
#   PREFIX/lib/libfencelock.so, PREFIX/lib/libfencelock.a, PREFIX/include/fencelock.h,
#   PREFIX/lib/pkgconfig/fencelock.pc
# Usage: scripts/install.sh PREFIX      (DESTDIR is honoured for staged installs)
# Builds the release library first (cargo build --release --lib) unless FENCELOCK_NO_BUILD=1.
set -eu

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
case "$1" in
    /*) prefix=$1 ;;
    *) prefix=$(pwd)/$1 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
destdir=${DESTDIR:-}

if [ "${FENCELOCK_NO_BUILD:-0}" != 1 ]; then
    (cd "$root" && cargo build --release --lib)
fi
for lib in libfencelock.so libfencelock.a; do
    if [ ! -f "$target_dir/release/$lib" ]; then
        echo "$0: $target_dir/release/$lib is missing; run cargo build --release" >&2
        exit 1
    fi
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
if [ -z "$version" ]; then
    echo "$0: no version found in Cargo.toml" >&2
    exit 1
fi

libdir=$destdir$prefix/lib
includedir=$destdir$prefix/include
pcdir=$libdir/pkgconfig
install -d "$libdir" "$includedir" "$pcdir"
install -m 0755 "$target_dir/release/libfencelock.so" "$libdir/libfencelock.so"
install -m 0644 "$target_dir/release/libfencelock.a" "$libdir/libfencelock.a"
install -m 0644 "$root/include/fencelock.h" "$includedir/fencelock.h"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$root/fencelock.pc.in" \
    | grep -v '^# pkg-config file of fencelock' > "$pcdir/fencelock.pc"
echo "installed fencelock $version under $destdir$prefix"
