#!/bin/sh
# Installs the Python binding into a virtual environment of the checkout's own (pip builds the
# Rust library with cargo and puts it inside the package), then runs its tests from a directory
# outside the source tree, so that the installed package is what they import. The environment,
# target/pytest-venv/pyX.Y (scripts/venv.sh), sees the Python's own packages and gets pytest from
# `make setup`, but installs fencelock into itself: two checkouts on one machine never replace
# each other's installed package mid-run.
# Extra arguments go to pytest.
#   PYTHON=python3.12 bindings/python/run_tests.sh -k seed
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
export PIP_ROOT_USER_ACTION=${PIP_ROOT_USER_ACTION:-ignore}  # CI runs as root on a throwaway machine
export PIP_DISABLE_PIP_VERSION_CHECK=1

PYTHON=$(PYTHON=$PYTHON sh "$HERE/../../scripts/venv.sh")
"$PYTHON" -c "import pytest" 2>/dev/null || { echo "$0: $PYTHON has no pytest: run make setup" >&2; exit 1; }
"$PYTHON" -m pip install --quiet --force-reinstall --no-deps "$HERE"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$PYTHON" -m pytest -p no:cacheprovider "$HERE/tests" "$@"
