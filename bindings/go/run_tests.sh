#!/bin/sh
# Puts the Rust static library the binding links into the module (scripts/go-lib.sh), then
# vets, format-checks and tests the Go binding with the race detector, runs the leader example,
# and so the gocronlock adapter, a module of its own (its go.mod uses the binding in this
# directory). Run from anywhere; `make test` calls it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

sh "$root/scripts/go-lib.sh"
cd "$here"
go vet ./...
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
    echo "gofmt would change:" >&2
    echo "$unformatted" >&2
    exit 1
fi
go test -race -count=1 ./...
# The leader example checks its own outcome (a deposed leader's late write refused).
go run ./examples/leader >/dev/null
# Nested modules are outside ./... of this one.
cd gocronlock
go vet ./...
go test -race -count=1 ./...
