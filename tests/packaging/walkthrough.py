"""The seed walkthrough with two real processes, run against an installed fencelock package.

Process A acquires `payment-export` (token N) with a short lease and stops working; its lease
runs out. Process B acquires the lock (token N+1, waiting for A's lease to end) and writes. A
then writes with token N and is refused; B's data stays. Exits 0 only if all of that holds.
Usage: python walkthrough.py DIRECTORY       (tests/packaging/python.sh runs it)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fencelock

KEY = "payments/today.csv"

PROCESS_A = """
import sys
import fencelock

store = fencelock.Store(sys.argv[1])
a = store.acquire("payment-export", ttl=0.3)
print(a.token, flush=True)
sys.stdin.readline()  # "paused" until B has written
try:
    store.put("payments/today.csv", b"A's stale export", a.token)
except fencelock.StaleTokenError as err:
    print(f"refused {err.token} {err.highest}", flush=True)
else:
    print("accepted", flush=True)
"""


def main() -> int:
    path = Path(sys.argv[1]) / "locks.db"
    a = subprocess.Popen(
        [sys.executable, "-c", PROCESS_A, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert a.stdin is not None and a.stdout is not None
    n = int(a.stdout.readline())
    print(f"A (pid {a.pid}) holds payment-export with token {n}")

    with fencelock.Store(path) as store:
        # Waits until A's lease has run out (A's process is alive, so only expiry frees it).
        b = store.acquire("payment-export", ttl=30, timeout=30)
        print(f"B holds payment-export with token {b.token}")
        if b.token != n + 1:
            print(f"FAILED: B's token is {b.token}, expected {n + 1}")
            return 1
        b.put(KEY, b"B's fresh export")

        out, _ = a.communicate("go\n", timeout=60)
        print(f"A writes with token {n}: {out.strip()}")
        if out.strip() != f"refused {n} {n + 1}" or a.returncode != 0:
            print("FAILED: A's stale write was not refused as expected")
            return 1
        kept = store.get(KEY)
        print(f"{KEY} holds {kept}")
        if kept != fencelock.Fenced(b"B's fresh export", n + 1):
            print("FAILED: B's data did not survive")
            return 1
        b.release()
    print(f"walkthrough ok with fencelock {fencelock.library_version()} from {fencelock.library_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
