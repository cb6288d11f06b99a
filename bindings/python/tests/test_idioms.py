"""The binding follows the conventions Python users rely on: standard-library timeouts, OSError
subclasses with errno and filename, enum states that print as names, a warning for a dropped
holder, and an exception when a with block outlived its lease."""

from __future__ import annotations

import errno
import gc
import os
import pickle
import threading
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import fencelock
from fencelock import LockState, Store, _errors

PATIENCE = 60  # only bounds a broken binding; no test asserts how long anything took


# -- timeouts ---------------------------------------------------------------------------------


def test_the_default_tries_once_and_zero_is_the_same(store):
    holder = store.acquire("busy", ttl=60)
    with pytest.raises(fencelock.LockedError) as info:
        store.acquire("busy")
    assert info.value.token == holder.token
    with pytest.raises(fencelock.LockedError):
        store.acquire("busy", timeout=0)
    with pytest.raises(fencelock.LockedError):
        store.acquire("busy", timeout=timedelta(0))
    holder.release()


def test_a_positive_timeout_waits_then_raises_a_timeout_error(store, other_store):
    holder = other_store.acquire("busy", ttl=60)
    with pytest.raises(fencelock.LockTimeoutError):
        store.acquire("busy", timeout=0.05)
    with pytest.raises(TimeoutError):  # the builtin, as the standard library's waits raise
        store.acquire("busy", timeout=timedelta(milliseconds=50))
    holder.release()


def test_timeout_none_waits_without_a_limit(store):
    holder = store.acquire("busy", ttl=60)
    got: list[int] = []

    def waiter() -> None:
        with store.acquire("busy", timeout=None) as mine:
            got.append(mine.token)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.2)  # let it wait; it must still be waiting, whatever the timing
    assert not got
    holder.release()
    thread.join(PATIENCE)
    assert got == [holder.token + 1]


def test_a_negative_timeout_points_at_none(store):
    with pytest.raises(ValueError, match="timeout=None waits without a limit"):
        store.acquire("x", timeout=-1)


# -- a dropped holder -------------------------------------------------------------------------


def test_a_bare_acquire_warns_and_is_released_at_once(store):
    with pytest.warns(fencelock.HolderDroppedWarning, match="'job'"):
        store.acquire("job", ttl=60)  # the pitfall: the result is dropped
        gc.collect()  # CPython already collected it; other interpreters may need this
    with store.acquire("job") as again:  # free: the dropped holder was released
        assert again.token > 0


def test_released_closed_and_lost_holders_do_not_warn(store):
    with warnings.catch_warnings():
        warnings.simplefilter("error", fencelock.HolderDroppedWarning)
        store.acquire("a").release()
        store.acquire("b").close()
        with store.acquire("c"):
            pass
        expired = store.acquire("d", ttl=0.01)
        while not expired.lost:
            time.sleep(0.01)
        del expired
        used = store.acquire("e")
        assert used.token > 0
        del used  # used, then dropped: released by the finalizer without a warning
        gc.collect()
    with store.acquire("e"):
        pass


def test_a_holder_still_held_at_exit_is_released_without_a_warning(store_path):
    from conftest import run

    out = run(
        f"""
        import fencelock
        store = fencelock.Store({str(store_path)!r})
        holder = store.acquire("kept", ttl=60)
        """
    )
    assert out.returncode == 0, out.stderr
    assert "HolderDroppedWarning" not in out.stderr, out.stderr
    with Store(store_path) as store, store.acquire("kept"):
        pass


# -- leaving a with block after the lease was lost ----------------------------------------------


def test_leaving_the_block_after_the_lease_was_taken_over_raises(store, other_store):
    with pytest.raises(fencelock.LockLostError) as info, store.acquire("short", ttl=0.05) as holder:
        successor = other_store.acquire("short", ttl=60, timeout=PATIENCE)
    assert info.value.token == holder.token
    assert holder.closed
    # The successor's lease is untouched by the stale holder's exit.
    assert successor.held()
    successor.release()


def test_leaving_the_block_after_the_lease_expired_raises(store):
    expected = pytest.raises(fencelock.LockLostError, match="before the with block ended")
    with expected, store.acquire("short", ttl=0.02) as holder:
        holder.wait_lost(PATIENCE)


def test_a_release_after_the_lease_was_taken_over_raises_once(store):
    holder = store.acquire("short", ttl=0.05)
    assert holder.wait_lost(PATIENCE)
    successor = store.acquire("short", ttl=60, timeout=PATIENCE)
    with pytest.raises(fencelock.LockLostError) as info:
        holder.release()
    assert info.value.token == holder.token
    holder.release()  # the second release does nothing
    holder.close()
    # The stale holder's release leaves the successor's lease alone, and a live one's is quiet.
    assert successor.held()
    successor.release()
    successor.release()


def test_a_wait_for_a_lock_this_thread_holds_is_refused_at_once(store):
    # From a thread of its own, which calls C directly; the main thread's waits, which run in a
    # helper thread (for Ctrl-C), are the next test's.
    outcome = []

    def work():
        holder = store.acquire("job", ttl=60)
        try:
            store.acquire("job", ttl=60, timeout=60)
        except fencelock.WouldDeadlockError as err:
            outcome.append((isinstance(err, RuntimeError), err.token == holder.token, "job" in str(err)))
        with pytest.raises(fencelock.LockedError):  # a try keeps its answer
            store.acquire("job", ttl=60)
        holder.release()
        store.acquire("job", ttl=60, timeout=60).release()  # released, it waits for nothing

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(PATIENCE)
    assert outcome == [(True, True, True)]


def test_a_wait_on_the_main_thread_for_a_lock_it_holds_is_refused_at_once(store):
    # Where most programs wait, and where filelock refuses too. The wait runs in a helper thread,
    # which the library must take for the main thread: else the wait runs out its timeout (here
    # 1 s, below the TTL; the refusal comes before any wait, whatever the timeout).
    assert threading.current_thread() is threading.main_thread()
    holder = store.acquire("job", ttl=60)
    with pytest.raises(fencelock.WouldDeadlockError) as info:
        store.acquire("job", ttl=60, timeout=1)
    assert info.value.token == holder.token
    holder.release()
    waited = store.acquire("job", ttl=60, timeout=PATIENCE)  # granted to the main thread too
    with pytest.raises(fencelock.WouldDeadlockError):
        store.acquire_all(["other", "job"], ttl=60, timeout=PATIENCE)
    waited.release()


def test_a_block_that_let_go_itself_or_held_to_the_end_does_not_raise(store):
    with store.acquire("a", ttl=60) as holder:
        holder.release()
    with store.acquire("b", ttl=60) as holder:
        holder.put("k", b"v")
    assert store.get("k").token == holder.token


def test_an_error_in_the_block_is_not_replaced_by_the_loss(store):
    with pytest.raises(KeyError) as info, store.acquire("short", ttl=0.02) as holder:
        holder.wait_lost(PATIENCE)
        raise KeyError("the block's own error")
    notes = getattr(info.value, "__notes__", None)
    if notes is not None:  # Python 3.11+
        assert any("lost the lease" in note for note in notes)


# -- errors of the operating system --------------------------------------------------------------


def test_a_missing_directory_is_a_file_not_found_error_with_errno_and_filename(tmp_path):
    path = tmp_path / "no-such-dir" / "locks.db"
    with pytest.raises(FileNotFoundError) as info:
        Store(path)
    err = info.value
    assert isinstance(err, fencelock.StoreNotFoundError)
    assert isinstance(err, fencelock.IoError)
    assert isinstance(err, fencelock.FencelockError)
    assert err.errno == errno.ENOENT
    assert err.strerror == os.strerror(errno.ENOENT)
    assert err.filename == str(path)
    assert str(path) in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err)
    assert (again.errno, again.filename, again.status) == (err.errno, err.filename, err.status)


def _unwritable_directory(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return locked
    # Root passes permission bits; sysfs refuses to create files even for root.
    return Path("/sys")


def test_a_directory_without_permission_is_a_permission_error(tmp_path):
    path = _unwritable_directory(tmp_path) / "fencelock-test.db"
    with pytest.raises(PermissionError) as info:
        Store(path)
    err = info.value
    assert isinstance(err, fencelock.StorePermissionError)
    assert err.errno in (errno.EACCES, errno.EPERM)
    assert err.filename == str(path)


def test_the_errno_comes_from_the_library_not_from_its_message(tmp_path, monkeypatch):
    # The errno is fencelock_error_os_code's, not read from the message. Reworded, the message
    # changes nothing: the text is OSError's, from the errno and the path.
    library = _errors.lib

    class Reworded:
        def __getattr__(self, name: str) -> Any:
            return getattr(library, name)

        @staticmethod
        def fencelock_error_message(err: Any) -> bytes:
            return b"I/O error: the directory is not there"

    monkeypatch.setattr(_errors, "lib", Reworded())
    path = tmp_path / "no-such-dir" / "locks.db"
    with pytest.raises(FileNotFoundError) as info:
        Store(path)
    assert type(info.value) is fencelock.StoreNotFoundError
    assert info.value.errno == errno.ENOENT
    assert info.value.strerror == os.strerror(errno.ENOENT)
    assert str(info.value) == f"[Errno {errno.ENOENT}] {os.strerror(errno.ENOENT)}: {str(path)!r}"
    assert info.value.message == "I/O error: the directory is not there"


def test_other_io_errors_carry_their_errno(tmp_path):
    regular = tmp_path / "file"
    regular.write_text("")
    with pytest.raises(fencelock.IoError) as info:
        Store(regular / "locks.db")
    assert info.value.errno == errno.ENOTDIR
    assert info.value.filename == str(regular / "locks.db")


# -- lock states ---------------------------------------------------------------------------------


def test_lock_states_print_as_their_names(store):
    holder = store.acquire("shown", ttl=60)
    (info,) = store.locks()
    assert str(info.state) == "held"
    assert f"{info.state}" == "held"
    assert f"{info.state:>6}" == "  held"
    assert str(LockState.HOLDER_DEAD) == "holder-dead"
    assert info.state == LockState.HELD == fencelock._ffi.LOCK_HELD  # still the C value
    assert "LockState.HELD" in repr(info)
    holder.release()


@pytest.mark.parametrize(
    "enum", [fencelock.LockState, fencelock.LockKind, fencelock.Ending, fencelock.Scope, fencelock.EventKind]
)
def test_every_named_enum_prints_its_name_and_stays_its_c_number(enum):
    for member in enum:
        name = member.name.lower().replace("_", "-")  # holder-dead, taken-over
        assert str(member) == name
        assert f"{member}" == name and f"{member:>12}" == name.rjust(12)
        assert isinstance(member, int) and enum(int(member)) is member
        assert repr(member).startswith(f"<{enum.__name__}.{member.name}: ")


def test_the_package_exports_exactly_its_public_names():
    expected = {
        "CancelledError", "CorruptError", "Ending", "Event", "EventKind", "Fenced", "FencelockError",
        "ForkedError", "HistoryEntry", "Holder", "HolderDroppedWarning", "InUseError",
        "IncompatibleVersionError", "InvalidArgumentError", "IoError", "Leader", "LeaderWatch",
        "Leadership", "Lock", "LockInfo", "LockKind", "LockLostError", "LockState", "LockTimeoutError",
        "LockedError", "Metrics", "Mode", "NotAStoreError", "NotFoundError", "NullPointerError",
        "PanicError", "PermitsMismatchError", "Scope", "StaleTokenError", "StorageError", "Store",
        "StoreNotFoundError", "StorePermissionError", "StoreReplacedError", "WaiterInfo",
        "WouldDeadlockError", "__version__", "library_path", "library_version", "library_version_number",
    }  # fmt: skip
    assert set(fencelock.__all__) == expected
    for name in expected:
        assert getattr(fencelock, name) is not None, name
