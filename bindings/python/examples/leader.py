"""A leader election whose deposed leader's late write is refused.

    python examples/leader.py

Leader A (a child process: this program with the role ``a``) wins the election "scheduler" and
writes the schedule with its term. It is then paused (SIGSTOP, as by a long GC pause) past its
lease; B campaigns, is granted the next term and writes. A resumes and writes late with its
term as the fencing token, and the store refuses the write: B's term is higher.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import fencelock


def leader_a(path: str) -> int:
    with fencelock.Store(path) as store, store.campaign("scheduler", b"node-a", ttl=0.6) as leadership:
        leadership.put("schedule", b"A's schedule")
        print(leadership.term, flush=True)
        sys.stdin.readline()  # paused here by the parent, then told to go on
        try:
            # Late: written with the term as the fencing token, as a write to a system of your
            # own would be (leadership.put would refuse before trying).
            store.put("schedule", b"A's stale schedule", leadership.term)
            print("ACCEPTED", flush=True)
        except fencelock.StaleTokenError as err:
            print(f"REFUSED ({err})", flush=True)
        print(f"leadership ended: {leadership.is_lost}", flush=True)
        leadership.close()  # its lease was lost: nothing to resign
    return 0


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "locks.db")
        fencelock.Store(path).close()
        a = subprocess.Popen(
            [sys.executable, __file__, "a", path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert a.stdout is not None and a.stdin is not None
        term_a = int(a.stdout.readline())
        print(f"A leads with term {term_a} and writes the schedule")
        os.kill(a.pid, signal.SIGSTOP)
        print("A is paused past its lease")
        with fencelock.Store(path) as store, store.campaign("scheduler", b"node-b") as b:
            b.put("schedule", b"B's schedule")
            print(f"B leads with term {b.term} and writes the schedule")
            os.kill(a.pid, signal.SIGCONT)
            out, _ = a.communicate("go\n", timeout=60)
            for line in out.splitlines():
                print(f"A wakes and writes late: {line}")
            kept = store.get("schedule")
            print(f"the schedule stays B's: {kept}")
            if not out.startswith("REFUSED") or kept != fencelock.Fenced(b"B's schedule", b.term):
                return 1
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["a"]:
        sys.exit(leader_a(sys.argv[2]))
    sys.exit(main())
