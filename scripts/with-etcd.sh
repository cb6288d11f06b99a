#!/bin/sh
# Runs a command next to an etcd node of its own: etcd on free loopback ports with its data in
# a temporary directory, FENCELOCK_ETCD_URL=etcd://127.0.0.1:PORT/<prefix> in the command's
# environment, the node killed and its data removed when the command ends. Fails, saying how to
# install it, when etcd is missing ($FENCELOCK_ETCD names another binary).
#   sh scripts/with-etcd.sh tests/c/build/test_etcd
set -eu
etcd=${FENCELOCK_ETCD:-etcd}
command -v "$etcd" >/dev/null || {
    echo "$0: $etcd is needed: apt-get install etcd-server (or set FENCELOCK_ETCD)" >&2
    exit 1
}
dir=$(mktemp -d)
pid=
cleanup() {
    [ -z "$pid" ] || { kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ports=$(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')
client=${ports% *}
peer=${ports#* }
"$etcd" --name node --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "node=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
pid=$!
ready=0
for _ in $(seq 1 300); do
    if python3 -c "import urllib.request, sys
sys.exit(0 if b'true' in urllib.request.urlopen('http://127.0.0.1:$client/health', timeout=1).read() else 1)" 2>/dev/null; then
        ready=1
        break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [ "$ready" -ne 1 ]; then
    echo "$0: etcd did not become healthy:" >&2
    tail -20 "$dir/etcd.log" >&2
    exit 1
fi
export FENCELOCK_ETCD_URL="etcd://127.0.0.1:$client/fencelock-test"
"$@"
