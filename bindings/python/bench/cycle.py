"""Times fencelock operations from Python, to set beside `cargo bench --bench ops` (same names,
same TTL, both modes). Prints the median per operation of one run.

    python3 bindings/python/bench/cycle.py            # 300 samples an operation
    python3 bindings/python/bench/cycle.py --samples 1000

Uses the installed package (pip install ./bindings/python). The difference to the Rust figures
is the binding's cost: argument checks, ctypes marshalling, the error out-parameter and handles.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import fencelock

TTL = 600.0
VALUE = b"x" * 100


def median_us(fn, samples: int) -> float:
    for _ in range(min(20, samples)):
        fn()
    times = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000.0


def cycle(store: fencelock.Store) -> None:
    with store.acquire("cycle", TTL):
        pass


def bench_mode(mode: fencelock.Mode, samples: int) -> None:
    name = mode.name.lower().replace("_", "-")
    with tempfile.TemporaryDirectory() as tmp, fencelock.Store(Path(tmp) / "bench.db", mode=mode) as store:
        held = store.acquire("held", TTL)
        store.put("key", VALUE, held.token)
        rows = [
            ("acquire+release", lambda: cycle(store)),
            ("get", lambda: store.get("key")),
            ("is_held", held.held),
            ("put with token", lambda: store.put("key", VALUE, held.token)),
        ]
        for label, fn in rows:
            print(f"{name}/{label:<18} {median_us(fn, samples):10.1f} us")
        held.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    print(f"fencelock {fencelock.library_version()} from {fencelock.library_path()}")
    print(f"median of {args.samples} samples, one run")
    for mode in fencelock.Mode:
        bench_mode(mode, args.samples)


if __name__ == "__main__":
    main()
