#!/usr/bin/env bash
# What a Python packager and its users do, outside the repository: build the sdist, check it
# carries the crate, build the manylinux_2_17 wheel from that sdist (as an index's builder
# would, with cargo-zigbuild), check it with `auditwheel show`, and install each of the two
# into a fresh virtual environment: the wheel with no network and no cargo, the sdist with
# cargo. Both then run the seed walkthrough (walkthrough.py) with a PATH that has no cargo.
# `twine check --strict` passes both, as a package index would take them.
# Runs with the tests' virtual environment of PYTHON (default python3; scripts/venv.sh), which
#   needs build, auditwheel, ziglang and cargo-zigbuild: `make setup` installs them into it.
# Usage: tests/packaging/python.sh      (`make test-packaging` runs it)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=$(sh "$root/scripts/venv.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
    echo "packaging/python: FAILED: $*" >&2
    exit 1
}
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

for module in venv build twine auditwheel ziglang; do
    "$python" -c "import $module" 2>/dev/null ||
        fail "$python has no module $module: run make setup"
done
bin=$("$python" -c 'import sys, sysconfig; print(sysconfig.get_path("scripts"))')
export PATH=$bin:$PATH # auditwheel and cargo-zigbuild, installed with that python
command -v cargo-zigbuild >/dev/null || fail "cargo-zigbuild is not on PATH: run make setup"
# cargo-zigbuild looks for zig on PATH or in the python it finds; pip's isolated build
# environment has neither, so name the ziglang package's binary.
CARGO_ZIGBUILD_ZIG_PATH=$("$python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
export CARGO_ZIGBUILD_ZIG_PATH
# Builds share one target directory of their own, so the dependencies are compiled once.
export CARGO_TARGET_DIR=${FENCELOCK_PACKAGING_TARGET:-$root/target/packaging}

dist=$work/dist
"$python" -m build --sdist --outdir "$dist" "$root/bindings/python" >"$work/sdist.log" 2>&1 ||
    fail "python -m build --sdist: $(tail -n 20 "$work/sdist.log")"
sdist=$(ls "$dist"/fencelock-*.tar.gz)
listing=$(tar tzf "$sdist")
# Every module of the package, as the checkout has them.
modules=$(cd "$root/bindings/python" && ls src/fencelock/*.py)
for file in rust/Cargo.toml rust/Cargo.lock rust/build.rs rust/cbindgen.toml rust/src/lib.rs \
    rust/src/ffi/mod.rs rust/include/fencelock.h $modules setup.py pyproject.toml; do
    grep -qx "fencelock-[^/]*/$file" <<<"$listing" || fail "the sdist has no $file"
done
if grep -Eq '/rust/(tests|benches|examples|fuzz|bindings)/' <<<"$listing"; then
    fail "the sdist carries the repository's tests, benches, examples, fuzz or bindings"
fi

# The wheel, built from the sdist (not from the checkout) against glibc 2.17.
FENCELOCK_GLIBC=2.17 "$python" -m pip wheel --no-deps --wheel-dir "$dist" "$sdist" \
    >"$work/wheel.log" 2>&1 || fail "building the wheel from the sdist: $(tail -n 30 "$work/wheel.log")"
wheel=$(ls "$dist"/fencelock-*.whl)
case "$(basename "$wheel")" in
    fencelock-*-py3-none-manylinux_2_17_x86_64.whl | fencelock-*-py3-none-manylinux_2_17_aarch64.whl) ;;
    *) fail "the wheel is tagged $(basename "$wheel"), not py3-none-manylinux_2_17" ;;
esac
"$python" -m twine check --strict "$sdist" "$wheel" >"$work/twine.log" 2>&1 ||
    fail "twine check --strict: $(cat "$work/twine.log")"
auditwheel show "$wheel" >"$work/auditwheel.log" 2>&1 || fail "auditwheel show: $(cat "$work/auditwheel.log")"
grep -q 'consistent with' "$work/auditwheel.log" && grep -q '"manylinux_2_17_' "$work/auditwheel.log" ||
    fail "auditwheel does not find the wheel consistent with manylinux_2_17: $(cat "$work/auditwheel.log")"
mkdir "$work/unpacked"
"$python" -m zipfile -e "$wheel" "$work/unpacked"
library=$work/unpacked/fencelock/libfencelock.so
[ -f "$library" ] || fail "the wheel has no fencelock/libfencelock.so"
for module in $modules; do
    [ -f "$work/unpacked/fencelock/${module#src/fencelock/}" ] || fail "the wheel has no ${module#src/}"
done
if readelf -S -W "$library" | grep -Eq '\.symtab|\.debug_'; then fail "the wheel's library is not stripped"; fi
grep -qx 'License-Expression: MIT OR Apache-2.0' "$work"/unpacked/fencelock-*.dist-info/METADATA ||
    fail "the wheel's METADATA has no SPDX License-Expression"

# A PATH without cargo, for the users of the installed package.
mkdir "$work/nocargo"
run_walkthrough() { # VENV LABEL
    local venv=$1 label=$2
    PATH=$venv/bin command -v cargo >/dev/null && fail "cargo is on the users' PATH"
    mkdir "$work/store-$label"
    (cd "$work/nocargo" && env -u FENCELOCK_LIBRARY -u PYTHONPATH PATH="$venv/bin" \
        python "$here/walkthrough.py" "$work/store-$label") >"$work/walk-$label.log" 2>&1 ||
        fail "the walkthrough with the $label failed: $(cat "$work/walk-$label.log")"
    grep -q "from $venv/" "$work/walk-$label.log" ||
        fail "the $label's walkthrough did not load the library from its venv: $(cat "$work/walk-$label.log")"
}

"$python" -m venv "$work/venv-wheel"
"$work/venv-wheel/bin/python" -m pip install --quiet --no-index "$wheel" ||
    fail "pip install of the wheel with --no-index"
run_walkthrough "$work/venv-wheel" wheel

# The sdist, installed as pip does on a machine with cargo (no FENCELOCK_GLIBC: a local build).
"$python" -m venv "$work/venv-sdist"
env -u FENCELOCK_GLIBC "$work/venv-sdist/bin/python" -m pip install --quiet "$sdist" \
    >"$work/sdist-install.log" 2>&1 || fail "pip install of the sdist: $(tail -n 30 "$work/sdist-install.log")"
run_walkthrough "$work/venv-sdist" sdist

echo "packaging/python: ok (sdist $(stat -c %s "$sdist") bytes; $(basename "$wheel") $(stat -c %s "$wheel") bytes," \
    "auditwheel: manylinux_2_17; the walkthrough ran from the wheel and from the sdist without cargo)"
