#!/bin/sh
# Installs (or, with --uninstall, removes) the C library of fencelock, as libsqlite3 is installed:
#   LIBDIR/libfencelock.so.VERSION        the shared library, stripped, with its SONAME
#   LIBDIR/libfencelock.so.SONAME-VERSION the link the dynamic linker follows (the SONAME)
#   LIBDIR/libfencelock.so                the link `cc -lfencelock` follows
#   LIBDIR/libfencelock.a                 the static library, without debug information
#   INCLUDEDIR/fencelock.h, PKGCONFIGDIR/fencelock.pc
#   DATADIR/fencelock/fencelock.supp      valgrind suppressions for programs that use it
# and with --cli the command-line tool too:
#   BINDIR/fencelock                      the command (the cli feature), stripped
#   MANDIR/man1/fencelock.1, MANDIR/man1/fencelock-COMMAND.1   its man pages
#   BASHCOMPDIR/fencelock, ZSHCOMPDIR/_fencelock, FISHCOMPDIR/fencelock.fish   its completions
# The man pages and completions are rendered by the built command (`fencelock generate`) from
# its own definitions. --uninstall removes every file either form installs.
# Usage: scripts/install.sh [--uninstall | --cli] PREFIX
# Environment: LIBDIR (default PREFIX/lib; PREFIX/lib64 on some distributions), INCLUDEDIR
# (default PREFIX/include), PKGCONFIGDIR (default LIBDIR/pkgconfig), BINDIR (default
# PREFIX/bin), DATADIR (default PREFIX/share), MANDIR (default PREFIX/share/man), BASHCOMPDIR (default
# PREFIX/share/bash-completion/completions), ZSHCOMPDIR (default PREFIX/share/zsh/site-functions),
# FISHCOMPDIR (default PREFIX/share/fish/vendor_completions.d), DESTDIR (a staging root put in
# front of every path written, never into fencelock.pc), STRIP (default strip).
# Builds first (cargo rustc --profile dist --lib --features capi --crate-type cdylib,staticlib,
# and cargo build --profile dist --features cli --bin fencelock with --cli: the release build
# without debug information) unless FENCELOCK_NO_BUILD=1; the SONAME comes
# from the built library (build.rs sets it). `make install` (CLI=1 for --cli) and `make
# uninstall` call this script.
set -eu

usage() {
    echo "usage: $0 [--uninstall | --cli] PREFIX   (LIBDIR, INCLUDEDIR, PKGCONFIGDIR, BINDIR, MANDIR, the" \
        "completion directories and DESTDIR from the environment)" >&2
    exit 2
}
action=install
cli=0
case "${1:-}" in
    --uninstall) action=uninstall; shift ;;
    --cli) cli=1; shift ;;
esac
[ $# -eq 1 ] && [ -n "$1" ] || usage
absolute() {
    case "$2" in
        /*) ;;
        *) echo "$0: $1 must be an absolute path, not '$2'" >&2; exit 2 ;;
    esac
}
absolute PREFIX "$1"
prefix=$1
libdir=${LIBDIR:-$prefix/lib}
includedir=${INCLUDEDIR:-$prefix/include}
pkgconfigdir=${PKGCONFIGDIR:-$libdir/pkgconfig}
bindir=${BINDIR:-$prefix/bin}
mandir=${MANDIR:-$prefix/share/man}
datadir=${DATADIR:-$prefix/share}
bashcompdir=${BASHCOMPDIR:-$prefix/share/bash-completion/completions}
zshcompdir=${ZSHCOMPDIR:-$prefix/share/zsh/site-functions}
fishcompdir=${FISHCOMPDIR:-$prefix/share/fish/vendor_completions.d}
absolute LIBDIR "$libdir"
absolute INCLUDEDIR "$includedir"
absolute PKGCONFIGDIR "$pkgconfigdir"
absolute BINDIR "$bindir"
absolute MANDIR "$mandir"
absolute DATADIR "$datadir"
absolute BASHCOMPDIR "$bashcompdir"
absolute ZSHCOMPDIR "$zshcompdir"
absolute FISHCOMPDIR "$fishcompdir"
destdir=${DESTDIR:-}
root=$(cd "$(dirname "$0")/.." && pwd)

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
if [ -z "$version" ]; then
    echo "$0: no version found in $root/Cargo.toml" >&2
    exit 1
fi

if [ $action = uninstall ]; then
    lib=$destdir$libdir
    # The SONAME link is the one libfencelock.so points to.
    soname=$(readlink "$lib/libfencelock.so" 2>/dev/null || true)
    man1=$destdir$mandir/man1
    for file in "$lib/libfencelock.so" ${soname:+"$lib/$soname"} "$lib/libfencelock.so.$version" \
        "$lib/libfencelock.a" "$destdir$includedir/fencelock.h" "$destdir$pkgconfigdir/fencelock.pc" \
        "$destdir$datadir/fencelock/fencelock.supp" \
        "$destdir$bindir/fencelock" "$man1/fencelock.1" "$man1"/fencelock-*.1 \
        "$destdir$bashcompdir/fencelock" "$destdir$zshcompdir/_fencelock" \
        "$destdir$fishcompdir/fencelock.fish"; do
        if [ -e "$file" ] || [ -L "$file" ]; then
            rm -f "$file"
            echo "removed $file"
        fi
    done
    rmdir "$destdir$datadir/fencelock" 2>/dev/null || true
    exit 0
fi

if [ "${FENCELOCK_NO_BUILD:-0}" != 1 ]; then
    # The C library is the capi feature's, its crate types given here (Cargo.toml's [lib] is
    # the rlib a Rust user builds); the command is the cli feature's.
    (cd "$root" && ${CARGO:-cargo} rustc --profile dist --lib --features capi --crate-type cdylib,staticlib)
    if [ $cli = 1 ]; then
        (cd "$root" && ${CARGO:-cargo} build --profile dist --features cli --bin fencelock)
    fi
fi
built=$(cd "$root" && ${CARGO:-cargo} metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/dist
for file in libfencelock.so libfencelock.a; do
    if [ ! -f "$built/$file" ]; then
        echo "$0: $built/$file is missing; run cargo rustc --profile dist --lib --features capi --crate-type cdylib,staticlib" >&2
        exit 1
    fi
done
if [ $cli = 1 ] && [ ! -x "$built/fencelock" ]; then
    echo "$0: $built/fencelock is missing; run cargo build --profile dist --features cli --bin fencelock" >&2
    exit 1
fi
strip=${STRIP:-strip}
for tool in readelf "$strip"; do
    command -v "$tool" >/dev/null || {
        echo "$0: $tool is needed (it comes with binutils)" >&2
        exit 1
    }
done
soname=$(readelf -d "$built/libfencelock.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
case "$soname" in
    libfencelock.so.*) ;;
    *) echo "$0: $built/libfencelock.so has no SONAME libfencelock.so.N (build.rs sets it)" >&2; exit 1 ;;
esac

install -d "$destdir$libdir" "$destdir$includedir" "$destdir$pkgconfigdir"
install -m 0755 "$built/libfencelock.so" "$destdir$libdir/libfencelock.so.$version"
ln -sf "libfencelock.so.$version" "$destdir$libdir/$soname"
ln -sf "$soname" "$destdir$libdir/libfencelock.so"
install -m 0644 "$built/libfencelock.a" "$destdir$libdir/libfencelock.a"
# The dist profile strips the shared library; the static one, an archive rustc does not strip,
# loses its debug information here and keeps the symbols the linker needs.
"$strip" --strip-debug "$destdir$libdir/libfencelock.a"
install -m 0644 "$root/include/fencelock.h" "$destdir$includedir/fencelock.h"
install -d "$destdir$datadir/fencelock"
install -m 0644 "$root/tests/c/fencelock.supp" "$destdir$datadir/fencelock/fencelock.supp"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@INCLUDEDIR@|$includedir|g" \
    -e "s|@VERSION@|$version|g" "$root/fencelock.pc.in" |
    grep -v '^# ' >"$destdir$pkgconfigdir/fencelock.pc"
if [ $cli = 1 ]; then
    pages=$(mktemp -d)
    trap 'rm -rf "$pages"' EXIT
    "$built/fencelock" generate man "$pages"
    for shell in bash zsh fish; do
        "$built/fencelock" generate completion $shell >"$pages/completion.$shell"
    done
    install -d "$destdir$bindir" "$destdir$mandir/man1" "$destdir$bashcompdir" "$destdir$zshcompdir" \
        "$destdir$fishcompdir"
    install -m 0755 "$built/fencelock" "$destdir$bindir/fencelock"
    install -m 0644 "$pages"/*.1 "$destdir$mandir/man1/"
    install -m 0644 "$pages/completion.bash" "$destdir$bashcompdir/fencelock"
    install -m 0644 "$pages/completion.zsh" "$destdir$zshcompdir/_fencelock"
    install -m 0644 "$pages/completion.fish" "$destdir$fishcompdir/fencelock.fish"
    echo "installed the fencelock command, its man pages and its bash, zsh and fish completions" \
        "under $destdir$prefix"
fi
echo "installed fencelock $version ($soname) under $destdir$prefix"

# The ldconfig hint, for an install onto this machine (not a staged one).
[ -z "$destdir" ] || exit 0
searched=$(ldconfig -v -N -X 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p' |
    while read -r dir; do readlink -f "$dir"; done)
if printf '%s\n' "$searched" | grep -qxF "$(readlink -f "$libdir")"; then
    echo "run ldconfig (as root) so that the dynamic linker finds $soname in $libdir"
else
    echo "$libdir is not searched by the dynamic linker: a program linked with -lfencelock finds" \
        "$soname at run time if you add $libdir to /etc/ld.so.conf.d/ and run ldconfig, set" \
        "LD_LIBRARY_PATH=$libdir, or link with -Wl,-rpath,$libdir"
fi
