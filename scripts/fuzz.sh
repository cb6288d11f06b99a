#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer's coverage instrumentation on the stable toolchain and
# runs each, one after the other, for SECONDS. Fails on a crash (a panic, a failed assertion, an
# input running over 10 s) or on a build without instrumentation. `make test-fuzz` and `make fuzz`
# call it.
# Usage: scripts/fuzz.sh SECONDS [TARGET...]      (default targets: ops c_abi decoders)
# Corpus: fuzz/target/corpus/TARGET (grows, never committed), read together with the committed
# seeds in fuzz/seeds/TARGET. A crashing input is written to fuzz/target/artifacts/TARGET/.
set -euo pipefail

if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
    echo "usage: $0 SECONDS [TARGET...]" >&2
    exit 2
fi
seconds=$1
shift
targets=("$@")
((${#targets[@]})) || targets=(ops c_abi decoders)
cd "$(dirname "$0")/../fuzz"

# What `cargo fuzz build --sanitizer none` passes; every flag is a stable codegen option, so no
# nightly toolchain is needed. There is no AddressSanitizer on stable (`-Zsanitizer` is nightly):
# memory errors and leaks are caught only by `cargo +nightly fuzz run` (see fuzz/README.md).
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares"
export RUST_BACKTRACE=${RUST_BACKTRACE:-1} # a panic's backtrace goes into the log
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros, which would not link
# without libFuzzer's runtime.
host=$(rustc -vV | sed -n 's/^host: //p')
${CARGO:-cargo} build --release --target "$host" --bins

# Each input opens a fresh store in a temporary directory: on tmpfs, where fsync costs nothing,
# inputs run about 2.5 times as fast. The targets check the rules, not durability.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    TMPDIR=$(mktemp -d /dev/shm/fencelock-fuzz.XXXXXX)
    export TMPDIR
    trap 'rm -rf "$TMPDIR"' EXIT # a crashed input leaves its store behind
fi

for t in "${targets[@]}"; do
    mkdir -p "target/corpus/$t" "target/artifacts/$t" "seeds/$t"
    log=target/$t.log
    echo "fuzz $t: ${seconds}s, log in fuzz/$log"
    status=0
    "target/$host/release/$t" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="target/artifacts/$t/" "target/corpus/$t" "seeds/$t" >"$log" 2>&1 ||
        status=$?
    if ((status)); then
        tail -n 60 "$log"
        input=$(ls -t "target/artifacts/$t" | head -n 1)
        echo "fuzz $t: FAILED (exit $status); reproduce with:" \
            "fuzz/target/$host/release/$t fuzz/target/artifacts/$t/$input" >&2
        exit 1
    fi
    # Without the sancov flags libFuzzer still runs, as a blind random tester: refuse that.
    if ! grep -Eq '^INFO: Loaded [0-9]+ modules +\([1-9][0-9]* inline 8-bit counters\)' "$log"; then
        echo "fuzz $t: FAILED: the binary has no coverage instrumentation" >&2
        exit 1
    fi
    grep -E '^#[0-9]+[[:space:]]+INITED' "$log" || true
    grep -E '^#[0-9]+[[:space:]]+DONE|^stat::' "$log"
done
