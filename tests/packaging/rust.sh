#!/usr/bin/env bash
# What a Rust user does, outside the repository: a fresh crate that depends on fencelock by path
# with the default features, whose dependency tree must hold only what the library needs (not
# the command-line tool's clap and serde_json, nor the etcd feature's client, tokio and tonic,
# nor the C library's cbindgen, not even as a build-dependency), builds no C library for it (no
# libfencelock .so or .a: those are the capi feature's, built by `cargo rustc --crate-type`),
# builds and runs the seed walkthrough (rust-user/main.rs); `cargo install --path .
# --features cli` installs a working command; and the crate `cargo package` makes (what
# crates.io would carry) holds the library's and the command's sources, their build and the
# header, and nothing else (`make check-publish` builds it as `cargo publish` would).
# Usage: tests/packaging/rust.sh      (`make test-packaging` runs it)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
    echo "packaging/rust: FAILED: $*" >&2
    exit 1
}
cargo=${CARGO:-cargo}
# Builds share one target directory of their own, so the dependencies are compiled once.
export CARGO_TARGET_DIR=${FENCELOCK_PACKAGING_TARGET:-$root/target/packaging}

# The package's files: Cargo's own, the build, the header, the sources; no tests, benches,
# bindings or fuzz targets.
files=$("$cargo" package --list --allow-dirty --manifest-path "$root/Cargo.toml" 2>"$work/package.log") ||
    fail "cargo package --list: $(cat "$work/package.log")"
stray=$(grep -vE '^(\.cargo_vcs_info\.json|Cargo\.(toml|toml\.orig|lock)|README\.md|build\.rs|cbindgen\.toml|include/fencelock\.h|src/.+\.rs)$' <<<"$files" || true)
[ -z "$stray" ] || fail "cargo package carries files the crate does not need: $stray"
grep -qx 'src/lib.rs' <<<"$files" || fail "cargo package --list lacks src/lib.rs: $files"
packaged=$(wc -l <<<"$files")

user=$work/user
mkdir -p "$user/src"
cp "$here/rust-user/main.rs" "$user/src/main.rs"
cat >"$user/Cargo.toml" <<TOML
[package]
name = "user"
version = "0.1.0"
edition = "2021"

[dependencies]
fencelock = { path = "$root" }
TOML
cd "$user"
# The lock file of the repository pins the same versions the library is tested with.
cp "$root/Cargo.lock" .
tree=$("$cargo" tree -e normal --prefix none --offline 2>/dev/null || "$cargo" tree -e normal --prefix none)
packages=$(sed 's/ (.*)$//; s/ (\*)$//' <<<"$tree" | sort -u | grep -v '^user ')
count=$(wc -l <<<"$packages")
# The cli feature's clap, serde_json, clap_mangen, clap_complete and base64, and the etcd
# feature's client, tokio and tonic.
for optional in clap serde_json clap_mangen clap_complete base64 etcd-client tokio tonic; do
    if grep -q "^$optional " <<<"$packages"; then fail "default features pull $optional: $packages"; fi
done
grep -q '^fencelock ' <<<"$packages" || fail "fencelock is not in the tree: $packages"
# Every package of the default tree, so that a new one is a decision: redb, parking_lot
# (with lock_api, parking_lot_core, scopeguard, smallvec, cfg-if), libc (OFD byte-range locks,
# the SIGBUS guard's sigaction), and rustix with its bitflags, linux-raw-sys and errno (the
# other system calls, safe: mmap, futex, memfd, flock, clocks, getrandom). rustix calls them
# through libc (its use-libc feature): its own system-call backend reads the vDSO at the first
# clock read and crashes there under valgrind, which C users run their programs in.
allowed='fencelock|redb|parking_lot|parking_lot_core|lock_api|scopeguard|smallvec|cfg-if|libc|rustix|bitflags|linux-raw-sys|errno'
extra=$(sed 's/ .*$//' <<<"$packages" | grep -vxE "$allowed" || true)
[ -z "$extra" ] || fail "the default dependency tree holds packages not allowed here: $extra"
# The C library's header generator, a build-dependency of the capi feature only.
build_tree=$("$cargo" tree -e normal,build --prefix none --offline 2>/dev/null || "$cargo" tree -e normal,build --prefix none)
if grep -q '^cbindgen ' <<<"$build_tree"; then fail "a Rust user's build runs cbindgen: $build_tree"; fi
"$cargo" build --message-format json >"$work/build.json" 2>"$work/build.log" ||
    fail "cargo build: $(cat "$work/build.log")"
# What cargo made for fencelock, by its own account (the target directory is shared with other
# builds, so its files say nothing): the rlib alone, no C library.
c_artifacts=$(grep -o '"[^"]*/libfencelock[^"/]*\.\(so\|a\)"' "$work/build.json" || true)
[ -z "$c_artifacts" ] || fail "a Rust user's build makes the C library: $c_artifacts"
grep -q '"[^"]*/libfencelock-[^"/]*\.rlib"' "$work/build.json" ||
    fail "cargo build reported no fencelock rlib: $(grep -o '"filenames":\[[^]]*\]' "$work/build.json")"
mkdir "$work/store"
"$CARGO_TARGET_DIR/debug/user" "$work/store" >"$work/walk.log" 2>&1 ||
    fail "the walkthrough: $(cat "$work/walk.log")"
grep -q "walkthrough ok" "$work/walk.log" || fail "unexpected output: $(cat "$work/walk.log")"

# The command, as the README installs it (a debug build: the test checks what is installed).
"$cargo" install --quiet --debug --locked --path "$root" --features cli --root "$work/installed" \
    >"$work/install.log" 2>&1 || fail "cargo install --path . --features cli: $(cat "$work/install.log")"
db=$work/store/cli.db
FENCELOCK_DB=$db "$work/installed/bin/fencelock" run --lock payment-export -- \
    sh -c 'printf "from the command\n" | "$0" put payments/today.csv' "$work/installed/bin/fencelock" ||
    fail "fencelock run ... put failed"
got=$(FENCELOCK_DB=$db "$work/installed/bin/fencelock" get payments/today.csv)
[ "$got" = "from the command" ] || fail "fencelock get printed '$got'"

echo "packaging/rust: ok ($packaged files in the crate, none stray; $count packages in the default dependency tree, fencelock included; no clap," \
    "serde_json, clap_mangen, clap_complete, etcd-client, tokio, tonic or cbindgen, no C library built; the walkthrough ran;" \
    "cargo install --features cli installs the command)"
