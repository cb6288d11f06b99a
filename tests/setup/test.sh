#!/usr/bin/env bash
# Tests scripts/setup.sh without installing anything. Each case runs a copy of it (and of
# scripts/venv.sh) in a checkout of its own, with a PATH of links to this machine's commands minus
# those the case hides, and fakes that record every call: apt-get and pip (which "install" by
# making the command or module appear), sudo (working or needing a password), id (root or not),
# python3 and the tests' virtual environment (the real python without site-packages or .pyc files, seeing only
# the fake modules of the case). Checks that a missing piece that cannot be installed is reported
# with its install command, that exactly the missing packages are installed, in order (apt-get,
# then the environment, then pip), that with everything present nothing is called and nothing
# changes, and that FENCELOCK_FEATURES= needs no etcd.
# Usage: tests/setup/test.sh      (`make test` runs it, after `make setup`)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
    echo "setup test: FAILED: $*" >&2
    exit 1
}

real_python=$(python3 -c 'import sys; print(sys.executable)')
pyver=$("$real_python" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
# Links to every command on PATH, the first of a name winning, as the shell would find them.
links=$work/links
mkdir "$links"
IFS=: read -ra dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
    [ -d "$dir" ] && [[ $dir == /* ]] || continue
    ln -s "$dir"/* "$links/" 2>/dev/null || true
done
# The fakes replace these; cargo-zigbuild lives in the fake environment.
rm -f "$links"/{apt-get,sudo,id,python3,cargo-zigbuild}

n=0
# Makes a fresh case directory $c, everything present: new_case [HIDDEN...]. A hidden command is
# left off PATH, a hidden module raises ImportError. FAKE_NO_VENV=1: no environment yet.
new_case() {
    n=$((n + 1))
    c=$work/case$n
    venv=$c/checkout/target/pytest-venv/$pyver
    log=$c/calls.log
    mkdir -p "$c/checkout/scripts" "$c/mods"
    cp "$root/scripts/setup.sh" "$root/scripts/venv.sh" "$c/checkout/scripts/"
    cp -a "$links" "$c/bin"
    : >"$log"
    for module in ensurepip pytest prometheus_client build twine auditwheel ziglang; do : >"$c/mods/$module.py"; done

    cat >"$c/bin/apt-get" <<EOF
#!/bin/sh
echo "apt-get \$*" >>"$log"
[ "\$1" = install ] && [ "\${FAKE_APT:-}" != noop ] || exit 0
for package; do
    case \$package in
        -*) ;;
        python3-venv) : >"$c/mods/ensurepip.py" ;;
        etcd-server) ln -s /bin/true "$c/bin/etcd" ;;
        *) ln -s /bin/true "$c/bin/\$package" ;;
    esac
done
EOF
    cat >"$c/bin/sudo" <<EOF
#!/bin/sh
echo "sudo \$*" >>"$log"
[ "\${FAKE_SUDO:-}" = works ] || { echo "sudo: a password is required" >&2; exit 1; }
[ "\$1" != -n ] || shift
exec "\$@"
EOF
    cat >"$c/bin/id" <<EOF
#!/bin/sh
[ "\$1" = -u ] && echo "\${FAKE_UID:-0}"
EOF
    # The fake base python makes the fake environment; the environment's python fakes pip.
    cat >"$c/bin/python3" <<EOF
#!/bin/sh
case " \$* " in
    *" -m venv "*)
        echo "python3 \$*" >>"$log"
        mkdir -p "$venv/bin" "$venv/site"
        cp "$c/venv-python" "$venv/bin/python"
        exit 0 ;;
    *" -m pip "*) echo "python3 \$*" >>"$log"; exit 1 ;;
esac
PYTHONPATH="$c/mods" exec "$real_python" -S -B "\$@"
EOF
    cat >"$c/venv-python" <<EOF
#!/bin/sh
case " \$* " in
    *" -m pip "*)
        echo "venv-python \$*" >>"$log"
        for package; do
            case \$package in -* | install | pip) ;; *) : >"$venv/site/\$package.py"; ln -s /bin/true "$venv/bin/\$package" ;; esac
        done
        exit 0 ;;
esac
# Its own packages, then the system's (--system-site-packages).
PYTHONPATH="$venv/site:$c/mods" exec "$real_python" -S -B "\$@"
EOF
    chmod +x "$c/bin/apt-get" "$c/bin/sudo" "$c/bin/id" "$c/bin/python3" "$c/venv-python"
    if [ "${FAKE_NO_VENV:-0}" != 1 ]; then
        mkdir -p "$venv/bin" "$venv/site"
        cp "$c/venv-python" "$venv/bin/python"
        ln -s /bin/true "$venv/bin/cargo-zigbuild"
    fi

    local hidden
    for hidden; do
        if [ -e "$c/mods/$hidden.py" ]; then
            echo "raise ImportError('hidden by the test')" >"$c/mods/$hidden.py"
        else
            rm -f "$c/bin/$hidden" "$venv/bin/$hidden"
        fi
    done
}

# Runs the case's setup.sh with only the given environment (NAME=VALUE...); sets status and out.
run_setup() {
    status=0
    out=$(env -i PATH="$c/bin" "$@" bash "$c/checkout/scripts/setup.sh" 2>&1) || status=$?
}
calls() { cat "$log"; }
expect_calls() { # EXPECTED (lines)
    [ "$(calls)" = "$1" ] || fail "case $n: the calls were:
$(calls)
expected:
$1
output: $out"
}
expect_status() { # ok|fail
    if [ "$1" = ok ]; then
        [ "$status" = 0 ] || fail "case $n: exit $status: $out"
    else
        [ "$status" != 0 ] || fail "case $n: exit 0, expected a failure: $out"
    fi
}
expect_line() { # LINE: a whole line of the output
    grep -qxF -- "$1" <<<"$out" || fail "case $n: no line '$1' in the output: $out"
}
snapshot() { (cd "$c" && find checkout bin mods -printf '%p %y %s %T@ %l\n' | sort); }

# Everything present, as root and as a user: nothing called, nothing changed.
for uid in 0 1000; do
    new_case
    before=$(snapshot)
    run_setup FAKE_UID=$uid
    expect_status ok
    expect_calls ""
    [ "$(snapshot)" = "$before" ] || fail "case $n: with everything present, files changed:
$(diff <(echo "$before") <(snapshot))"
done

# A user without passwordless sudo: one message with every missing piece and its command;
# nothing installed.
new_case valgrind pytest
run_setup FAKE_UID=1000
expect_status fail
expect_calls "sudo -n true"
grep -q '^  valgrind  .*cmd:valgrind' <<<"$out" || fail "case $n: valgrind is not listed: $out"
grep -q '^  pytest  .*venv:pytest' <<<"$out" || fail "case $n: pytest is not listed: $out"
expect_line "  sudo apt-get update && sudo apt-get install -y valgrind"
expect_line "  $venv/bin/python -m pip install pytest"
[ "$(grep -c 'cannot install' <<<"$out")" = 1 ] || fail "case $n: not one message: $out"

# The same with no environment yet (so no cargo-zigbuild in it): the command makes it first.
FAKE_NO_VENV=1 new_case valgrind pytest
run_setup FAKE_UID=1000
expect_status fail
expect_line "  python3 -m venv --system-site-packages $venv && $venv/bin/python -m pip install pytest cargo-zigbuild"
[ ! -e "$venv" ] || fail "case $n: the environment was made although nothing could be installed"

# Root installs exactly the missing package.
new_case valgrind
run_setup FAKE_UID=0
expect_status ok
expect_calls "apt-get update -qq
apt-get install -y -qq valgrind"

# A user with passwordless sudo installs through it.
new_case valgrind
run_setup FAKE_UID=1000 FAKE_SUDO=works
expect_status ok
expect_calls "sudo -n true
sudo -n apt-get update -qq
apt-get update -qq
sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind
apt-get install -y -qq valgrind"

# Only a Python package missing: pip into the environment, as a user too (it is the user's).
new_case pytest cargo-zigbuild
run_setup FAKE_UID=1000
expect_status ok
expect_calls "venv-python -m pip install --quiet pytest cargo-zigbuild"

# A fresh machine: python3-venv before the environment, the environment before pip.
FAKE_NO_VENV=1 new_case ensurepip build
run_setup FAKE_UID=0
expect_status ok
expect_calls "apt-get update -qq
apt-get install -y -qq python3-venv
python3 -m venv --system-site-packages $venv
venv-python -m pip install --quiet build cargo-zigbuild"

# The etcd pieces: needed by default, not with FENCELOCK_FEATURES= (make test FEATURES=).
new_case etcd protoc
run_setup FAKE_UID=0 FENCELOCK_FEATURES=
expect_status ok
expect_calls ""
new_case etcd
run_setup FAKE_UID=0
expect_status ok
expect_calls "apt-get update -qq
apt-get install -y -qq etcd-server"

# No apt-get: the message, with Debian's names.
new_case valgrind apt-get
run_setup FAKE_UID=0
expect_status fail
expect_calls ""
expect_line "  apt-get update && apt-get install -y valgrind"

# An install that leaves the piece missing fails.
new_case valgrind
run_setup FAKE_UID=0 FAKE_APT=noop
expect_status fail
grep -q 'still missing' <<<"$out" || fail "case $n: no 'still missing' after an install that did nothing: $out"

echo "setup test: ok ($n cases: reports, installs only what is missing, in order, nothing when all is present)"
