"""Real processes: the seed scenario with SIGSTOP/SIGCONT (with fenced writes through the redo
log too), fork(), and dead holders."""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys

import pytest
from conftest import spawn

import fencelock
from fencelock import Fenced, Store

PATIENCE = 60

PROCESS_A = """
import sys, threading, fencelock
path, mode = sys.argv[1], sys.argv[2]
store = fencelock.Store(path, write_log=mode == "write-log")
holder = store.acquire("payment-export", ttl=0.5)
lost = threading.Event()
if mode == "keep-alive":
    holder.keep_alive(on_lost=lambda h: lost.set())
print("acquired", holder.token, flush=True)
sys.stdin.readline()  # SIGSTOPped here; the parent writes a line after SIGCONT
try:
    store.put("exports/today.csv", b"written by A", holder.token)
    print("store.put: ok", flush=True)
except fencelock.StaleTokenError as err:
    print("store.put: StaleTokenError", err.token, err.highest, flush=True)
try:
    holder.put("exports/today.csv", b"written by A")
    print("holder.put: ok", flush=True)
except fencelock.LockLostError as err:
    print("holder.put: LockLostError", err.token, flush=True)
print("held:", holder.held(), flush=True)
if mode == "keep-alive":
    print("on_lost:", lost.wait(60), flush=True)
holder.close()
"""


def _log_segments(store_path):
    """The segments of the store's redo log (``Store(write_log=True)``) beside its file."""
    return list(store_path.parent.glob(store_path.name + ".wal.*"))


@pytest.mark.parametrize("mode", ["plain", "keep-alive", "write-log"])
def test_seed_scenario_stopped_process_cannot_overwrite(store_path, mode):
    write_log = mode == "write-log"
    Store(store_path).close()  # create it before two processes race to
    a = spawn(PROCESS_A, str(store_path), mode)
    try:
        line = a.stdout.readline().split()
        assert line[:1] == ["acquired"], a.stderr.read()
        token_a = int(line[1])
        os.kill(a.pid, signal.SIGSTOP)
        with Store(store_path, write_log=write_log) as store:
            # B waits (no time limit in the test) until A's lease runs out; A's process lives on,
            # stopped, so only the TTL frees the lock.
            b = store.acquire("payment-export", ttl=30, timeout=PATIENCE)
            assert b.token == token_a + 1
            b.put("exports/today.csv", b"written by B")
            # A, the first to open the store, decided where fenced writes go.
            assert bool(_log_segments(store_path)) == write_log
            os.kill(a.pid, signal.SIGCONT)
            out, err = a.communicate("go\n", timeout=PATIENCE)
            assert a.returncode == 0, err
            lines = out.splitlines()
            assert f"store.put: StaleTokenError {token_a} {b.token}" in lines
            assert f"holder.put: LockLostError {token_a}" in lines
            assert "held: False" in lines
            if mode == "keep-alive":
                assert "on_lost: True" in lines
            # B's data stayed, and B still holds the lock.
            assert store.get("exports/today.csv") == Fenced(b"written by B", b.token)
            assert b.held()
            b.close()
        # The last close left one store file that holds B's write.
        with Store(store_path, read_only=True) as reader:
            assert reader.get("exports/today.csv") == Fenced(b"written by B", token_a + 1)
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait()


def test_killed_holder_frees_the_lock_before_its_ttl(store_path):
    Store(store_path).close()
    a = spawn(
        """
        import sys, fencelock
        holder = fencelock.Store(sys.argv[1]).acquire("job", ttl=3600)
        print(holder.token, flush=True)
        sys.stdin.readline()
        """,
        str(store_path),
    )
    token = int(a.stdout.readline())
    with Store(store_path) as store:
        with pytest.raises(fencelock.LockedError) as info:
            store.acquire("job")
        assert info.value.pid == a.pid and info.value.token == token
        a.kill()
        a.wait()
        # The lease has an hour left, but its process is dead: the lock is free.
        with store.acquire("job", timeout=PATIENCE) as mine:
            assert mine.token > token


def _child(check) -> None:
    """Runs `check` in the forked child and leaves with its exit code; never returns."""
    code = 99
    try:
        code = check()
    except BaseException:  # noqa: BLE001 - any surprise is a failure, reported by the exit code
        import traceback

        traceback.print_exc()
        code = 98
    finally:
        os._exit(code)


def _wait_child(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)


def test_store_used_after_fork_raises_forked_error(store_path):
    store = Store(store_path)
    holder = store.acquire("parent-lock", ttl=60)
    store.put("k", b"parent", holder.token)

    def check():
        try:
            store.get("k")
            return 1
        except fencelock.ForkedError as err:
            if "open a new" not in str(err) or err.status != 12:
                return 2
        try:
            store.acquire("child-lock")
            return 3
        except fencelock.ForkedError:
            pass
        try:
            holder.release()  # refused: it is the parent's lease
            return 4
        except fencelock.ForkedError:
            pass
        # A new Store in the child works, and sees the parent's lease still held.
        with Store(store_path) as fresh:
            if fresh.get("k").value != b"parent":
                return 5
            try:
                fresh.acquire("parent-lock")
                return 6
            except fencelock.LockedError as err:
                if err.token != holder.token:
                    return 7
        return 0

    pid = os.fork()
    if pid == 0:
        _child(check)
    assert _wait_child(pid) == 0
    assert holder.held()
    assert store.get("k").value == b"parent"
    holder.close()
    store.close()


def test_finalizers_in_a_forked_child_leave_the_parents_lease(store_path):
    store = Store(store_path)
    holder = store.acquire("parent-lock", ttl=60)
    other = store.acquire("other-lock", ttl=60)

    def check():
        nonlocal holder, other
        with_holder = holder
        holder = None
        del with_holder
        gc.collect()  # the holder's finalizer runs here
        other.close()  # an inherited holder: closing it frees nothing and releases nothing
        store.close()
        atexit._run_exitfuncs()  # what a normal interpreter exit runs, finalizers included
        return 0

    pid = os.fork()
    if pid == 0:
        _child(check)
    assert _wait_child(pid) == 0
    assert holder.held() and other.held()
    with pytest.raises(fencelock.LockedError):
        store.acquire("parent-lock")
    holder.close()
    other.close()
    store.close()


def test_fork_while_another_thread_is_inside_a_handle(store_path):
    store = Store(store_path)
    # Stand-in for a thread of the parent caught inside a call at the moment of the fork: it
    # holds the handle's lock, and no thread of the child will ever release it.
    store._res._lock.acquire()

    def check():
        signal.alarm(30)  # a hang becomes a failure, not a stuck test run
        try:
            store.get("k")
            return 1
        except fencelock.ForkedError:
            return 0

    try:
        pid = os.fork()
        if pid == 0:
            _child(check)
    finally:
        store._res._lock.release()
    assert _wait_child(pid) == 0
    assert store.get("k") is None
    store.close()


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_child_process_started_with_subprocess_is_independent(store_path):
    # A fresh interpreter (no fork of a store) opens its own store and takes turns with us.
    with Store(store_path) as store:
        holder = store.acquire("turns", ttl=60)
        child = spawn(
            """
            import sys, fencelock
            with fencelock.Store(sys.argv[1]) as s:
                with s.acquire("turns", timeout=60) as h:
                    h.put("by-child", str(h.token))
            """,
            str(store_path),
        )
        holder.put("by-parent", b"1")
        holder.release()
        _, err = child.communicate(timeout=PATIENCE)
        assert child.returncode == 0, err
        written = store.get("by-child")
        assert written is not None and int(written.value) > holder.token
