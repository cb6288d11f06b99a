#!/usr/bin/env bash
# Installs what `make test` needs and this machine lacks, and nothing else: Debian packages with
# apt-get (as root, or through `sudo -n` when that needs no password), Python packages with pip
# into the tests' virtual environment (scripts/venv.sh), never into the system's Python. What is
# there already is left alone: no reinstall, no upgrade, no apt-get update when nothing is missing.
# When a Debian package is missing and cannot be installed (not root and no passwordless sudo, or
# no apt-get), it installs nothing, prints in one message every missing piece and the commands
# that install them, and fails. `make setup` runs it, and `make test` first.
# Usage: scripts/setup.sh      Environment: FENCELOCK_FEATURES (default etcd, as make's FEATURES;
#   without etcd the etcd rows are not needed), PYTHON (as in scripts/venv.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHON=${PYTHON:-python3}
features=${FENCELOCK_FEATURES-etcd}

# The one list of what make test needs: the package, where it comes from, the feature that needs
# it (- for every build), how to tell it is here, and why. The checks: cmd:A,B commands on PATH;
# py:M the module M imports in PYTHON; venv:M it imports in the tests' virtual environment;
# venvcmd:C the command C is on PATH after the environment's bin (as tests/packaging/python.sh
# runs it).
table='
valgrind           apt  -     cmd:valgrind            the C tests run under valgrind (tests/c)
pkg-config         apt  -     cmd:pkg-config          the C packaging test builds with pkg-config (tests/packaging/c.sh)
g++                apt  -     cmd:g++,c++             the C++ header test (tests/c); libfuzzer-sys compiles libFuzzer (make test-fuzz)
binutils           apt  -     cmd:readelf,strip       make install, scripts/go-lib.sh and the packaging tests (readelf, strip)
python3-venv       apt  -     py:ensurepip            the virtual environments of the Python tests and the packaging test
tmux               apt  -     cmd:tmux                the test of fencelock top drives it in a tmux pane (tests/cli/top.rs)
bsdutils           apt  -     cmd:script              the wait notices are tested on a pty of script(1) (tests/cli/notice.rs)
etcd-server        apt  etcd  cmd:etcd                make test-etcd and the etcd walkthroughs start etcd nodes of their own
protobuf-compiler  apt  etcd  cmd:protoc              the etcd feature builds etcd-client, whose build script runs protoc
pytest             pip  -     venv:pytest             the Python binding tests (make test-python)
prometheus-client  pip  -     venv:prometheus_client  the Python binding tests parse the metrics text with the parser of the Prometheus client
build              pip  -     venv:build              the sdist (tests/packaging/python.sh)
twine              pip  -     venv:twine              twine check of the sdist and the wheel, as an index checks them (tests/packaging/python.sh)
auditwheel         pip  -     venv:auditwheel         the manylinux check of the wheel (tests/packaging/python.sh)
ziglang            pip  -     venv:ziglang            the zig that cargo-zigbuild links the manylinux_2_17 wheel with
cargo-zigbuild     pip  -     venvcmd:cargo-zigbuild  builds the manylinux_2_17 wheel (tests/packaging/python.sh)
'

venv_python=$(sh "$root/scripts/venv.sh" --path)
venv=${venv_python%/bin/python}

present() { # CHECK
    local what=${1#*:} command
    case $1 in
        cmd:*) for command in ${what//,/ }; do command -v "$command" >/dev/null || return 1; done ;;
        py:*) "$PYTHON" -c "import $what" 2>/dev/null ;;
        # Until the environment exists, its python would see what PYTHON sees.
        venv:*)
            local python=$PYTHON
            [ ! -x "$venv_python" ] || python=$venv_python
            "$python" -c "import $what" 2>/dev/null
            ;;
        venvcmd:*) (PATH=$venv/bin:$PATH && command -v "$what" >/dev/null) ;;
        *) echo "$0: unknown check $1" >&2; exit 2 ;;
    esac
}

# Sets missing_apt, missing_pip and report (a line for each missing piece).
scan() {
    local package from needs check why
    missing_apt=() missing_pip=() report=
    hash -r # a command installed since the last scan
    while read -r package from needs check why; do
        [ -n "$package" ] || continue
        [ "$needs" = - ] || [[ $features == *"$needs"* ]] || continue
        present "$check" && continue
        if [ "$from" = apt ]; then missing_apt+=("$package"); else missing_pip+=("$package"); fi
        report+=$(printf '\n  %-18s %-14s %-24s %s' "$package" "($from)" "$check" "$why")
    done <<<"$table"
}

scan
if ((${#missing_apt[@]} + ${#missing_pip[@]} == 0)); then
    echo "setup: everything make test needs is here"
    exit 0
fi

is_root=0
[ "$(id -u)" != 0 ] || is_root=1
sudo=()
cannot=
if ((${#missing_apt[@]})); then
    if ! command -v apt-get >/dev/null; then
        cannot="there is no apt-get: these are Debian's package names, install their equivalents"
    elif ((is_root)); then
        :
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        cannot="not root, and sudo -n needs a password"
    fi
fi
if [ -n "$cannot" ]; then
    # Nothing is installed: one message, with every command, is easier to act on than a half-done set-up.
    {
        echo "$0: make test needs these, missing here, and cannot install them ($cannot):$report"
        echo "Install them with:"
        as=
        ((is_root)) || as="sudo "
        if ((${#missing_apt[@]})); then
            echo "  ${as}apt-get update && ${as}apt-get install -y ${missing_apt[*]}"
        fi
        if ((${#missing_pip[@]})); then
            pip="$venv_python -m pip install ${missing_pip[*]}"
            [ -x "$venv_python" ] || pip="$PYTHON -m venv --system-site-packages $venv && $pip"
            echo "  $pip"
        fi
    } >&2
    exit 1
fi

echo "setup: installing what make test needs and this machine lacks:$report"
if ((${#missing_apt[@]})); then
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_apt[@]}"
fi
if ((${#missing_pip[@]})); then
    # After apt-get: the environment needs python3-venv.
    venv_python=$(sh "$root/scripts/venv.sh")
    PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
        "$venv_python" -m pip install --quiet "${missing_pip[@]}"
fi

scan
if ((${#missing_apt[@]} + ${#missing_pip[@]})); then
    echo "$0: still missing after installing:$report" >&2
    exit 1
fi
echo "setup: done"
