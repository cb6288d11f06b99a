#!/usr/bin/env bash
# What a Go user does, outside the repository: fetch the module from a module proxy, vendor it
# into a fresh module of their own, and build the seed walkthrough (go-user/main.go, which
# imports the module by its path alone, no alias, as goimports leaves it) fully static with the
# vendored copy, then run it. The proxy is a file:// GOPROXY serving the module
# as a release would publish it: bindings/go's files (those git tracks or would track) plus the
# static library `make go-lib` makes, as the zip `go mod download` expects. Also checks the
# message for a missing library, the dynamic build, and -tags fencelock_system against a
# `make install` prefix. The nested module gocronlock is served beside it, as a release tags it
# (gocronlock/vX.Y.Z): a second user's program gets it, with gocron, and runs a job under its
# lock, while the first user's module graph has no gocron in it.
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
# The module and the nested gocronlock module, each zipped as `go mod download` expects: a
# module's zip leaves out the directories of modules nested in it.
files=$(cd "$root" && git ls-files --cached --others --exclude-standard bindings/go)
python3 - "$root" "$module" "$version" "$work/proxy" "bindings/go/libfencelock_linux_$arch.a" $files <<'EOF'
import sys, zipfile
from pathlib import Path

root, module, version, proxy, *files = sys.argv[1:]
nested = sorted({str(Path(f).parent) for f in files if f.endswith("/go.mod") and f != "bindings/go/go.mod"})
for directory in ["bindings/go", *nested]:
    path = module + directory.removeprefix("bindings/go")
    at = Path(proxy, path, "@v")
    at.mkdir(parents=True)
    mine = [f for f in files if f.startswith(directory + "/")
            and not any(f.startswith(n + "/") for n in nested if n != directory and n.startswith(directory + "/"))]
    with zipfile.ZipFile(at / f"{version}.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for name in mine:
            archive.write(Path(root, name), f"{path}@{version}/" + name.removeprefix(directory + "/"))
    (at / f"{version}.mod").write_text(Path(root, directory, "go.mod").read_text())
    (at / f"{version}.info").write_text(f'{{"Version":"{version}","Time":"2026-01-01T00:00:00Z"}}\n')
    (at / "list").write_text(version + "\n")
EOF
listing=$(python3 -m zipfile -l "$work/proxy/$module/@v/$version.zip") # not piped: grep -q and pipefail
if grep -q "$module@$version/gocronlock/" <<<"$listing"; then fail "the module's zip carries the nested gocronlock module"; fi
grep -q "^	$module $version$" "$root/bindings/go/gocronlock/go.mod" ||
    fail "bindings/go/gocronlock/go.mod does not require $module $version, the version a release publishes"
# What gocronlock needs besides fencelock (gocron and its dependencies) comes from this
# machine's module cache, itself laid out as a module proxy (the Go module proxy fills it the
# first time): the users' builds below reach no network. `all`, because a user's go mod tidy
# also reads the modules of gocron's own tests (testify, goleak), which a plain download skips.
(cd "$root/bindings/go/gocronlock" && go mod download all) || fail "go mod download of gocronlock's dependencies"
cache=$(go env GOMODCACHE)/cache/download

# goimports, with which a user's editor writes import lines: it adds an alias to an import whose
# path does not end in the package's name (it takes "fencelock" for .../fencelock-go, as
# "wasmtime" for .../wasmtime-go). Built from this machine's module cache (the Go module proxy
# fills it the first time).
GOBIN=$work/bin go install golang.org/x/tools/cmd/goimports@v0.52.0 >"$work/goimports.log" 2>&1 ||
    fail "go install goimports: $(cat "$work/goimports.log")"

# A user's fresh module, with its own caches and only the file:// proxy.
export GOPATH=$work/gopath GOMODCACHE=$work/gopath/pkg/mod GOCACHE=$work/gocache
export GOPROXY=file://$work/proxy,file://$cache GOSUMDB=off GOFLAGS= GOWORK=off CGO_ENABLED=1
user=$work/user
mkdir "$user"
cp "$here/go-user/main.go" "$user/"
cd "$user"
go mod init example.com/user >/dev/null 2>&1
grep -qx "	\"$module\"" main.go || fail "go-user/main.go does not import $module by its path alone"
go get "$module@$version" >"$work/get.log" 2>&1 || fail "go get $module@$version: $(cat "$work/get.log")"
go mod tidy >/dev/null 2>&1 || fail "go mod tidy"
if grep -q gocron go.mod go.sum; then fail "a user of the module alone depends on gocron: $(cat go.mod go.sum)"; fi
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
# No glibc warnings about getaddrinfo or getpwuid_r (the dist profile's LTO, Cargo.toml).
if grep -q warning "$work/static.log"; then fail "the static build printed warnings: $(cat "$work/static.log")"; fi
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

# Before a release, as bindings/go/README.md says: a checkout's module through a replace
# directive (make go-lib has put the library into it; run_tests.sh and the proxy above use it).
checkout=$work/user-checkout
mkdir "$checkout"
cp "$here/go-user/main.go" "$checkout/"
cd "$checkout"
go mod init example.com/user-checkout >/dev/null 2>&1
go mod edit -require="$module@v0.0.0" -replace="$module=$root/bindings/go" ||
    fail "go mod edit -require -replace"
go build -o app-checkout . >"$work/checkout.log" 2>&1 || fail "the build through replace: $(cat "$work/checkout.log")"
./app-checkout >checkout.out 2>&1 || fail "the program built through replace: $(cat checkout.out)"
grep -q "walkthrough ok" checkout.out || fail "unexpected output: $(cat checkout.out)"

# A user of the gocron adapter: a fresh module that gets gocronlock, with gocron, and runs a job.
cronuser=$work/user-gocron
mkdir "$cronuser"
cp "$here/go-user-gocron/main.go" "$cronuser/"
cd "$cronuser"
go mod init example.com/user-gocron >/dev/null 2>&1
go get "$module/gocronlock@$version" >"$work/get-gocron.log" 2>&1 ||
    fail "go get $module/gocronlock@$version: $(cat "$work/get-gocron.log")"
go mod tidy >"$work/tidy-gocron.log" 2>&1 || fail "go mod tidy with gocronlock: $(cat "$work/tidy-gocron.log")"
go build -o app-gocron . >"$work/gocron.log" 2>&1 || fail "the gocron build: $(cat "$work/gocron.log")"
./app-gocron >gocron.out 2>&1 || fail "the gocron program: $(cat gocron.out)"
grep -q "gocron ok" gocron.out || fail "unexpected output: $(cat gocron.out)"

echo "packaging/go: ok (go get from a proxy, a plain import goimports keeps, go mod vendor, static and dynamic builds run the walkthrough;" \
    "a clear message without the library; -tags fencelock_system; gocronlock from its own module," \
    "the module alone without gocron)"
