#!/bin/sh
# Prints the python of the tests' virtual environment, target/pytest-venv/pyX.Y for PYTHON
# (default python3), making the environment first if it is missing. It sees that Python's own
# packages (--system-site-packages), and the test tools scripts/setup.sh installs go into it, so
# that nothing is installed into the system's Python (which Debian 12 refuses: PEP 668).
# bindings/python/run_tests.sh, tests/packaging/python.sh and scripts/setup.sh use it.
# Usage: scripts/venv.sh [--path]      (--path: only print the path, make nothing)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
venv=$root/target/pytest-venv/$("$python" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
if [ "${1:-}" != --path ] && [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv --system-site-packages "$venv" >&2
fi
echo "$venv/bin/python"
