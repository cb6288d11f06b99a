#!/usr/bin/env bash
# What a C user does, outside the repository: `make install` into a prefix, then build the
# walkthrough (examples/c/payment_export.c, copied out) with pkg-config, linked shared and fully
# static, and run both. Checks the installed files and links, the SONAME and the NEEDED entry
# that follows it, that the libraries are stripped, a staged install (DESTDIR, LIBDIR=lib64)
# whose fencelock.pc names the final paths, and that `make uninstall` removes every file.
# Usage: tests/packaging/c.sh      (`make test-packaging` runs it)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
    echo "packaging/c: FAILED: $*" >&2
    exit 1
}

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
# Cargo's compatibility rule: before 1.0 a minor release may break the ABI.
if [ "$major" = 0 ]; then soname=libfencelock.so.0.$minor; else soname=libfencelock.so.$major; fi

prefix=$work/prefix
make -s -C "$root" install PREFIX="$prefix" >"$work/install.log"
lib=$prefix/lib
[ -f "$lib/libfencelock.so.$version" ] && [ ! -L "$lib/libfencelock.so.$version" ] ||
    fail "no regular file $lib/libfencelock.so.$version"
[ "$(readlink "$lib/$soname")" = "libfencelock.so.$version" ] || fail "$soname is not a link to libfencelock.so.$version"
[ "$(readlink "$lib/libfencelock.so")" = "$soname" ] || fail "libfencelock.so is not a link to $soname"
for file in "$lib/libfencelock.a" "$prefix/include/fencelock.h" "$lib/pkgconfig/fencelock.pc" \
    "$prefix/share/fencelock/fencelock.supp"; do
    [ -f "$file" ] || fail "$file is missing"
done
got=$(readelf -d "$lib/libfencelock.so.$version" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$got" = "$soname" ] || fail "SONAME is '$got', expected $soname"
grep -q "is not searched by the dynamic linker" "$work/install.log" || fail "no ldconfig hint for a private prefix"
# Stripped: no symbol table or debug information in the shared library, no debug information in
# the static one (whose symbols the linker needs).
if readelf -S -W "$lib/libfencelock.so.$version" | grep -Eq '\.symtab|\.debug_'; then
    fail "the shared library is not stripped"
fi
if readelf -S -W "$lib/libfencelock.a" | grep -q '\.debug_'; then
    fail "the static library has debug information"
fi

cp "$root/examples/c/payment_export.c" "$work/"
cd "$work"
export PKG_CONFIG_PATH=$lib/pkgconfig
[ "$(pkg-config --modversion fencelock)" = "$version" ] || fail "pkg-config --modversion is not $version"
cc -std=c11 -Wall -Wextra -Werror payment_export.c $(pkg-config --cflags --libs fencelock) -o shared
readelf -d shared | grep -q "NEEDED.*\[$soname\]" || fail "the shared program does not record NEEDED $soname"
LD_LIBRARY_PATH=$lib ./shared >shared.out || fail "the shared program failed: $(cat shared.out)"
grep -q "B's export survived A's stale writes." shared.out || fail "unexpected output: $(cat shared.out)"
# Under valgrind's defaults with the installed suppressions (README, C section): no error, the
# library being stripped as installed.
if command -v valgrind >/dev/null; then
    LD_LIBRARY_PATH=$lib valgrind -q --error-exitcode=1 --leak-check=full \
        --suppressions="$prefix/share/fencelock/fencelock.supp" ./shared >/dev/null 2>valgrind.log ||
        fail "valgrind with fencelock.supp reports errors: $(cat valgrind.log)"
fi

cc -static -std=c11 -Wall -Wextra -Werror payment_export.c \
    $(pkg-config --static --cflags --libs fencelock) -o static 2>static.log ||
    fail "the static link failed: $(cat static.log)"
# Quiet, as libsqlite3's: the dist profile's LTO keeps std's getaddrinfo and getpwuid_r
# callers, which glibc warns about in a static link, out of the library (Cargo.toml).
[ ! -s static.log ] || fail "the static link printed warnings: $(cat static.log)"
if readelf -d static | grep -q NEEDED; then fail "the static program needs shared libraries"; fi
./static >static.out || fail "the static program failed: $(cat static.out)"
grep -q "B's export survived A's stale writes." static.out || fail "unexpected output: $(cat static.out)"

make -s -C "$root" uninstall PREFIX="$prefix" >/dev/null
left=$(find "$prefix" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"

# A distribution's staged install into lib64.
stage=$work/stage
make -s -C "$root" install PREFIX=/usr LIBDIR=/usr/lib64 DESTDIR="$stage" >"$work/stage.log"
[ -f "$stage/usr/lib64/libfencelock.so.$version" ] || fail "DESTDIR/LIBDIR: no $stage/usr/lib64/libfencelock.so.$version"
[ -f "$stage/usr/include/fencelock.h" ] || fail "DESTDIR: no $stage/usr/include/fencelock.h"
grep -qx 'libdir=/usr/lib64' "$stage/usr/lib64/pkgconfig/fencelock.pc" || fail "fencelock.pc does not say libdir=/usr/lib64"
if grep -q "$stage" "$stage/usr/lib64/pkgconfig/fencelock.pc"; then fail "fencelock.pc names the DESTDIR"; fi
if grep -q ldconfig "$work/stage.log"; then fail "a staged install printed the ldconfig hint"; fi
make -s -C "$root" uninstall PREFIX=/usr LIBDIR=/usr/lib64 DESTDIR="$stage" >/dev/null
left=$(find "$stage" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall with DESTDIR left: $left"

echo "packaging/c: ok ($soname; pkg-config shared and static builds run the walkthrough; DESTDIR, LIBDIR and uninstall)"
