#!/bin/sh
# Puts the static library the Go module links into the module: builds it (cargo rustc --profile
# dist --lib --features capi --crate-type cdylib,staticlib: the build of make install and the
# Python package, so that make test compiles it once) and installs it, without debug
# information, as bindings/go/libfencelock_linux_ARCH.a for this machine's architecture (amd64
# or arm64).
# A release of the Go module carries these files; `make go-lib` and bindings/go/run_tests.sh
# call this script. Usage: scripts/go-lib.sh (FENCELOCK_FEATURES=etcd adds the etcd backend)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) echo "$0: the Go module ships libraries for x86_64 and aarch64 Linux, not $(uname -m)" >&2; exit 1 ;;
esac
[ "$(uname -s)" = Linux ] || { echo "$0: the Go module ships libraries for Linux only" >&2; exit 1; }
command -v "${STRIP:-strip}" >/dev/null || { echo "$0: ${STRIP:-strip} is needed (binutils)" >&2; exit 1; }
cd "$root"
${CARGO:-cargo} rustc --profile dist --lib --features "capi ${FENCELOCK_FEATURES:-}" --crate-type cdylib,staticlib
built=$(${CARGO:-cargo} metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/dist/libfencelock.a
out=$root/bindings/go/libfencelock_linux_$arch.a
# Replaced only when the build changed, so that Go's build cache stays valid otherwise.
if [ ! -f "$out" ] || [ "$built" -nt "$out" ]; then
    cp "$built" "$out.tmp"
    "${STRIP:-strip}" --strip-debug "$out.tmp"
    mv "$out.tmp" "$out"
fi
echo "bindings/go/libfencelock_linux_$arch.a: $(wc -c <"$out") bytes"
