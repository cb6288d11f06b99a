#!/usr/bin/env bash
# What a Go user does, outside the repository: fetch the module from a module proxy, vendor it
# into a fresh module of their own, and build the seed walkthrough (go-user/main.go, which
# imports the module by its path alone, no alias, as goimports leaves it) fully static with the
# vendored copy, then run it. The proxy is a file:// GOPROXY serving the module
# as a release would publish it: bindings/go's files (those git tracks or would track) plus the
# static library `make go-lib` makes, as the zip `go mod download` expects. Also checks the
# message for a missing library, the dynamic build, and -tags fencelock_system against a
# `make install` prefix.
# Usage: tests/packaging/go.sh      (`make test-packaging` runs it)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT # the module cache is read-only
fail() {
    echo "packaging/go: FAILED: $*" >&2
    exit 1
}
module=github.com/fencelock/fencelock-go
version=v$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) fail "no Go library for $(uname -m)" ;;
esac

sh "$root/scripts/go-lib.sh" >/dev/null
proxy=$work/proxy/$module/@v
mkdir -p "$proxy"
files=$(cd "$root" && git ls-files --cached --others --exclude-standard bindings/go)
python3 - "$root" "$module" "$version" "$proxy" "bindings/go/libfencelock_linux_$arch.a" $files <<'EOF'
import sys, zipfile
from pathlib import Path

root, module, version, proxy, *files = sys.argv[1:]
prefix = f"{module}@{version}/"
with zipfile.ZipFile(f"{proxy}/{version}.zip", "w", zipfile.ZIP_DEFLATED) as archive:
    for name in files:
        archive.write(Path(root, name), prefix + name.removeprefix("bindings/go/"))
Path(proxy, f"{version}.mod").write_text(Path(root, "bindings/go/go.mod").read_text())
Path(proxy, f"{version}.info").write_text(f'{{"Version":"{version}","Time":"2026-01-01T00:00:00Z"}}\n')
Path(proxy, "list").write_text(version + "\n")
EOF

# goimports, with which a user's editor writes import lines: it adds an alias to an import whose
# path does not end in the package's name (it takes "fencelock" for .../fencelock-go, as
# "wasmtime" for .../wasmtime-go). Built from this machine's module cache (the Go module proxy
# fills it the first time).
GOBIN=$work/bin go install golang.org/x/tools/cmd/goimports@v0.52.0 >"$work/goimports.log" 2>&1 ||
    fail "go install goimports: $(cat "$work/goimports.log")"

# A user's fresh module, with its own caches and only the file:// proxy.
export GOPATH=$work/gopath GOMODCACHE=$work/gopath/pkg/mod GOCACHE=$work/gocache
export GOPROXY=file://$work/proxy GOSUMDB=off GOFLAGS= GOWORK=off CGO_ENABLED=1
user=$work/user
mkdir "$user"
cp "$here/go-user/main.go" "$user/"
cd "$user"
go mod init example.com/user >/dev/null 2>&1
grep -qx "	\"$module\"" main.go || fail "go-user/main.go does not import $module by its path alone"
go get "$module@$version" >"$work/get.log" 2>&1 || fail "go get $module@$version: $(cat "$work/get.log")"
go mod tidy >/dev/null 2>&1 || fail "go mod tidy"
unaliased=$("$work/bin/goimports" -l main.go) || fail "goimports failed"
[ -z "$unaliased" ] || fail "goimports rewrites the import of $module: $("$work/bin/goimports" -d main.go)"
go mod vendor || fail "go mod vendor"
vendored=vendor/$module
for file in fencelock.h cgo.go "libfencelock_linux_$arch.a"; do
    [ -f "$vendored/$file" ] || fail "go mod vendor did not copy $file"
done

static_flags=(-ldflags '-linkmode external -extldflags "-static"')
go build -mod=vendor "${static_flags[@]}" -o app-static . >"$work/static.log" 2>&1 ||
    fail "the static build: $(cat "$work/static.log")"
if readelf -d app-static | grep -q NEEDED; then fail "the static build needs shared libraries"; fi
./app-static >static.out 2>&1 || fail "the static program: $(cat static.out)"
grep -q "walkthrough ok" static.out || fail "unexpected output: $(cat static.out)"

go build -mod=vendor -o app-dynamic . >"$work/dynamic.log" 2>&1 || fail "the dynamic build: $(cat "$work/dynamic.log")"
if readelf -d app-dynamic | grep -q 'NEEDED.*libfencelock'; then fail "the Go program needs libfencelock.so"; fi
./app-dynamic >dynamic.out 2>&1 || fail "the dynamic program: $(cat dynamic.out)"

# A module without the library says what to do (a fresh build cache, as for a user who never
# had the library: Go's cache does not know that the cgo code's result depends on the file).
mv "$vendored/libfencelock_linux_$arch.a" "$work/library.a"
if GOCACHE=$work/gocache-missing go build -mod=vendor -o app-missing . >"$work/missing.log" 2>&1; then
    fail "a build without the library succeeded"
fi
grep -q "libfencelock_linux_$arch.a is missing from the module directory: run \`make go-lib\`" "$work/missing.log" ||
    fail "no clear message for the missing library: $(cat "$work/missing.log")"

# -tags fencelock_system links the C library `make install` put in a prefix, here statically.
make -s -C "$root" install PREFIX="$work/prefix" >/dev/null
CGO_LDFLAGS="-L$work/prefix/lib" go build -mod=vendor -tags fencelock_system "${static_flags[@]}" -o app-system . \
    >"$work/system.log" 2>&1 || fail "the fencelock_system build: $(cat "$work/system.log")"
./app-system >system.out 2>&1 || fail "the fencelock_system program: $(cat system.out)"
grep -q "walkthrough ok" system.out || fail "unexpected output: $(cat system.out)"

echo "packaging/go: ok (go get from a proxy, a plain import goimports keeps, go mod vendor, static and dynamic builds run the walkthrough;" \
    "a clear message without the library; -tags fencelock_system)"
