"""Ctrl-C ends every blocking call at once and changes nothing: real processes get a real SIGINT.

A child process blocks (a waiting acquire, a wait for a lost lease, an open behind a busy store)
with a long timeout; the parent sends SIGINT a second into the wait. Python runs signal handlers
on the main thread only between bytecodes, so a binding that waits inside one C call on the main
thread delivers the KeyboardInterrupt only when the whole timeout is over. The bounds below are
far above what a working binding needs (milliseconds) and far below the child's timeout.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import time

import pytest
from conftest import spawn

import fencelock
from fencelock import Store

CHILD_TIMEOUT = 20  # what the child's call would wait without the interrupt
BOUND = 10  # the child must be gone this long after SIGINT
PATIENCE = 60

# The child announces "waiting", blocks in `call` on the main thread, and reports what ended it.
CHILD = """
import sys, time, fencelock
path = sys.argv[1]
{setup}
print("waiting", flush=True)
try:
    {call}
    print("returned", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", time.monotonic(), flush=True)
{after}
"""


def _interrupt(child) -> list[str]:
    """Sends SIGINT to `child` a second after it says it is waiting; returns its output lines
    after checking that it exited well within its call's timeout."""
    try:
        assert child.stdout.readline().strip() == "waiting", child.stderr.read()
        time.sleep(1.0)  # let it get deep into the wait
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=PATIENCE)
        gone = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    lines = out.splitlines()
    assert lines and lines[0].startswith("KeyboardInterrupt"), (out, err)
    assert gone < BOUND, f"the child left {gone:.1f} s after SIGINT: the wait ignored Ctrl-C"
    print(f"KeyboardInterrupt {float(lines[0].split()[1]) - sent:.4f} s after SIGINT")
    return lines[1:]


def test_ctrl_c_ends_a_waiting_acquire_and_changes_nothing(store_path):
    with Store(store_path) as store:
        holder = store.acquire("job", ttl=120)
        store.put("counter", b"1", holder.token)
        child = spawn(
            CHILD.format(
                setup="store = fencelock.Store(path)",
                call=f"store.acquire('job', ttl=60, timeout={CHILD_TIMEOUT}).put('counter', b'2')",
                after="print('locks', [(i.name, i.token) for i in store.locks()], flush=True)",
            ),
            str(store_path),
        )
        after = _interrupt(child)
        # The child's store still works after the interrupt and saw only the parent's lease.
        assert after == [f"locks [('job', {holder.token})]"]
        assert holder.held()
        assert store.get("counter") == fencelock.Fenced(b"1", holder.token)
        [info] = store.locks()
        assert (info.name, info.token, info.pid) == ("job", holder.token, os.getpid())
        holder.release()
        with store.acquire("job") as next_holder:
            assert next_holder.token == holder.token + 1  # the child was granted nothing


@pytest.mark.parametrize("timeout", [CHILD_TIMEOUT, None])
def test_ctrl_c_ends_wait_lost_and_keeps_the_lease(store_path, timeout):
    child = spawn(
        CHILD.format(
            setup="store = fencelock.Store(path); holder = store.acquire('mine', ttl=120)",
            call=f"holder.wait_lost({timeout})",
            after="print('held', holder.held(), 'lost', holder.lost, flush=True)",
        ),
        str(store_path),
    )
    assert _interrupt(child) == ["held True lost False"]


# src/liveness.rs (`lock_for_open`): an open of a multi-process store holds a lock on the byte at
# offset 2**61 of the file while it runs, and other opens wait for it up to the busy timeout.
# Holding that byte here stands in for another process paused inside its open.
OPEN_BYTE = 1 << 61


@contextlib.contextmanager
def _open_under_way(path):
    fd = os.open(path, os.O_RDWR)
    try:
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for an open file description lock)
        lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, OPEN_BYTE, 1, 0)
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, lock)
        yield
    finally:
        os.close(fd)  # drops the lock


@pytest.mark.skipif(not hasattr(fcntl, "F_OFD_SETLK"), reason="needs open file description locks")
def test_busy_timeout_and_ctrl_c_end_an_open_behind_a_busy_store(store_path):
    Store(store_path).close()
    with _open_under_way(store_path):
        with pytest.raises(fencelock.LockTimeoutError):
            Store(store_path, busy_timeout=0.2)  # without the stand-in this would open
        child = spawn(
            CHILD.format(
                setup="",
                call=f"fencelock.Store(path, busy_timeout={CHILD_TIMEOUT})",
                after="",
            ),
            str(store_path),
        )
        assert _interrupt(child) == []
    with Store(store_path, busy_timeout=PATIENCE) as store:
        assert store.locks() == []
