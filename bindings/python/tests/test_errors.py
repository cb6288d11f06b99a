"""Exceptions mirror the status codes; bad arguments fail in Python before reaching C."""

from __future__ import annotations

import math
import os
import pickle
from datetime import timedelta

import pytest
from conftest import run

import fencelock
from fencelock import Store, _errors, _ffi

EXPECTED = {
    1: fencelock.LockedError,
    2: fencelock.StaleTokenError,
    3: fencelock.LockLostError,
    4: fencelock.LockTimeoutError,
    5: fencelock.InvalidArgumentError,
    6: fencelock.NullPointerError,
    7: fencelock.IoError,
    8: fencelock.CorruptError,
    9: fencelock.NotAStoreError,
    10: fencelock.IncompatibleVersionError,
    11: fencelock.InUseError,
    12: fencelock.ForkedError,
    13: fencelock.StorageError,
    14: fencelock.NotFoundError,
    15: fencelock.PanicError,
    16: fencelock.CancelledError,
    17: fencelock.StoreReplacedError,
    18: fencelock.PermitsMismatchError,
    19: fencelock.WouldDeadlockError,
}


def test_one_exception_per_status_code():
    assert _errors._BY_STATUS == EXPECTED
    for status, cls in EXPECTED.items():
        assert issubclass(cls, fencelock.FencelockError)
        err = _errors.error_from(status, None)  # no error object: the static description
        assert type(err) is cls
        assert err.status == status
        assert str(err) and str(err) == err.message
        assert str(err).startswith(_errors.status_str(status))
    assert type(_errors.error_from(999, None)) is fencelock.FencelockError
    assert _errors.status_str(999) == "unknown status"


def test_builtin_bases():
    assert issubclass(fencelock.LockTimeoutError, TimeoutError)
    assert issubclass(fencelock.InvalidArgumentError, ValueError)
    assert issubclass(fencelock.IoError, OSError)
    err = _errors.error_from(_ffi.TIMEOUT, None)
    assert err.errno is None and str(err) == err.message  # OSError did not eat the arguments


def test_errors_pickle():
    err = _errors.error_from(_ffi.STALE_TOKEN, None)
    err.token, err.highest = 3, 7
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is fencelock.StaleTokenError
    assert (again.status, again.message, again.token, again.highest) == (2, err.message, 3, 7)


def test_locked_error_fields(store):
    holder = store.acquire("busy", ttl=60)
    with pytest.raises(fencelock.LockedError) as info:
        store.acquire("busy")
    assert info.value.token == holder.token
    assert info.value.pid == os.getpid()
    assert 0 < info.value.remaining <= 60
    assert str(holder.token) in str(info.value)


def test_timeout_error(store, other_store):
    holder = other_store.acquire("busy", ttl=60)
    with pytest.raises(fencelock.LockTimeoutError):
        store.acquire("busy", timeout=0.05)
    with pytest.raises(TimeoutError):  # also the builtin
        store.acquire("busy", timeout=timedelta(milliseconds=1))
    with pytest.raises(fencelock.LockedError):  # a zero timeout tries once
        store.acquire("busy", timeout=timedelta(0))
    holder.release()
    store.acquire("busy", timeout=0).close()  # free: a zero timeout still gets it


def test_lock_lost_error_fields(store, other_store):
    old = other_store.acquire("lost", ttl=0.05)
    # Wait (without a time limit on the test) until the lease ran out and another took over.
    new = store.acquire("lost", ttl=60, timeout=60)
    with pytest.raises(fencelock.LockLostError) as info:
        old.put("k", b"v")
    assert info.value.token == old.token
    assert info.value.current in (None, new.token)
    assert old.lost
    assert not old.held()


def test_invalid_argument_from_the_library(store):
    with pytest.raises(fencelock.InvalidArgumentError):
        store.acquire("x", ttl=timedelta(days=31))  # over the 30-day maximum
    with pytest.raises(fencelock.InvalidArgumentError):
        store.put(b"k" * 1025, b"v", 1)
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
        store.acquire("n" * 1025)
    holder = store.acquire("x")
    with pytest.raises(fencelock.InvalidArgumentError):
        store.put("k", b"v", holder.token + 1000)  # never granted
    with pytest.raises(fencelock.InvalidArgumentError):
        holder.keep_alive(0.001)  # keep-alive needs at least 3 ms


def test_not_a_store(tmp_path):
    path = tmp_path / "foreign.txt"
    path.write_bytes(b"this is somebody else's file\n" * 100)
    with pytest.raises(fencelock.NotAStoreError):
        Store(path)
    assert path.read_bytes() == b"this is somebody else's file\n" * 100  # untouched


def test_io_error(tmp_path):
    with pytest.raises(fencelock.IoError) as info:
        Store(tmp_path / "no" / "such" / "dir" / "x.db")
    assert isinstance(info.value, OSError)


@pytest.mark.parametrize("parent_mode", ["single-process", "multi-process"])
def test_in_use_for_a_single_process_open_beside_another_process(tmp_path, parent_mode):
    path = tmp_path / "in-use.db"
    with Store(path, mode=parent_mode):
        child = run(
            """
            import sys, fencelock
            try:
                fencelock.Store(sys.argv[1], mode="single-process")
            except fencelock.InUseError:
                sys.exit(0)
            sys.exit(1)
            """,
            str(path),
        )
        assert child.returncode == 0, child.stderr


def test_corrupt_or_not_a_store_for_a_damaged_file(tmp_path):
    path = tmp_path / "damaged.db"
    with Store(path) as store:
        holder = store.acquire("x")
        store.put("k", b"v" * 1000, holder.token)
        holder.close()
    data = bytearray(path.read_bytes())
    # Keep redb's magic number; overwrite the header that follows it.
    data[9:4096] = b"\xa5" * (4096 - 9)
    path.write_bytes(bytes(data))
    with pytest.raises((fencelock.CorruptError, fencelock.NotAStoreError, fencelock.StorageError)):
        Store(path)


def test_a_damaged_store_prints_nothing_on_stderr(tmp_path):
    # Every page but the header's zeroed in turn, in a child whose stderr is captured: the
    # damage surfaces as exceptions, never as a panic message from the library.
    path = tmp_path / "store.db"
    with Store(path) as store:
        holder = store.acquire("job")
        for i in range(5):
            holder.put(f"k{i}", b"value")
        holder.close()
    child = run(
        """
        import sys
        from pathlib import Path
        import fencelock
        pristine = Path(sys.argv[1]).read_bytes()
        failed = 0
        for page in range(1, len(pristine) // 4096):
            data = bytearray(pristine)
            data[page * 4096:(page + 1) * 4096] = bytes(4096)
            damaged = Path(sys.argv[1] + f".{page}")
            damaged.write_bytes(bytes(data))
            try:
                with fencelock.Store(damaged) as store:
                    store.get("k3")
                    store.locks()
                    store.keys()
            except fencelock.FencelockError:
                failed += 1
        print(failed)
        """,
        str(path),
    )
    assert child.returncode == 0, child.stderr
    assert child.stderr == ""
    assert int(child.stdout) > 0, "no damaged page was met"


# --- bad arguments never reach C ---------------------------------------------------------------


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda s: s.acquire(b"bytes-name"), TypeError),
        (lambda s: s.acquire(None), TypeError),
        (lambda s: s.acquire(""), ValueError),
        (lambda s: s.acquire("a\0b"), ValueError),
        (lambda s: s.acquire("x", ttl=0), ValueError),
        (lambda s: s.acquire("x", ttl=-1), ValueError),
        (lambda s: s.acquire("x", ttl=math.nan), ValueError),
        (lambda s: s.acquire("x", ttl=math.inf), ValueError),
        (lambda s: s.acquire("x", ttl="5"), TypeError),
        (lambda s: s.acquire("x", ttl=True), TypeError),
        (lambda s: s.acquire("x", ttl=timedelta(seconds=-1)), ValueError),
        (lambda s: s.acquire("x", timeout=-0.5), ValueError),
        (lambda s: s.acquire("x", timeout="1"), TypeError),
        (lambda s: s.put(b"", b"v", 1), ValueError),
        (lambda s: s.put("", b"v", 1), ValueError),
        (lambda s: s.put(1, b"v", 1), TypeError),
        (lambda s: s.put(b"k", 5, 1), TypeError),
        (lambda s: s.put(b"k", None, 1), TypeError),
        (lambda s: s.put(b"k", b"v", 0), ValueError),
        (lambda s: s.put(b"k", b"v", -3), ValueError),
        (lambda s: s.put(b"k", b"v", 2**64), ValueError),
        (lambda s: s.put(b"k", b"v", 1.0), TypeError),
        (lambda s: s.put(b"k", b"v", True), TypeError),
        (lambda s: s.get(b""), ValueError),
        (lambda s: s.get(None), TypeError),
        (lambda s: s.delete(b"k", 0), ValueError),
        (lambda s: s.keys(3), TypeError),
        (lambda s: s.fence("", 1), ValueError),
        (lambda s: s.fence("r\0", 1), ValueError),
        (lambda s: s.fence("r", "1"), TypeError),
        (lambda s: s.acquire_and_put("x", b"", b"v"), ValueError),
        (lambda s: s.acquire_and_put("x", b"k", b"v", ttl=0), ValueError),
    ],
)
def test_bad_arguments(store, call, exc):
    with pytest.raises(exc) as info:
        call(store)
    # Raised by the binding itself, not mapped from a C status.
    assert not isinstance(info.value, fencelock.FencelockError)
    assert store.keys() == [] and store.locks() == []


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda h: h.extend(0), ValueError),
        (lambda h: h.extend("1"), TypeError),
        (lambda h: h.put(b"", b"v"), ValueError),
        (lambda h: h.put(b"k", 1), TypeError),
        (lambda h: h.delete(""), ValueError),
        (lambda h: h.keep_alive(-1), ValueError),
        (lambda h: h.wait_lost(-1), ValueError),
        (lambda h: h.on_lost("not callable"), TypeError),
    ],
)
def test_bad_holder_arguments(store, call, exc):
    with store.acquire("x") as holder:
        with pytest.raises(exc) as info:
            call(holder)
        assert not isinstance(info.value, fencelock.FencelockError)
        assert holder.held()


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"mode": "both"}, ValueError),
        ({"mode": 7}, TypeError),
        ({"max_value_len": 0}, ValueError),
        ({"max_value_len": -1}, ValueError),
        ({"max_value_len": "1"}, TypeError),
        ({"busy_timeout": 0}, ValueError),
        ({"busy_timeout": -1}, ValueError),
        ({"busy_timeout": "1"}, TypeError),
        ({"read_only": 1}, TypeError),
        ({"history": "no"}, TypeError),
        ({"write_log": 1}, TypeError),
    ],
)
def test_bad_store_arguments(tmp_path, kwargs, exc):
    with pytest.raises(exc):
        Store(tmp_path / "x.db", **kwargs)
    assert not (tmp_path / "x.db").exists()


def test_bad_paths(tmp_path):
    with pytest.raises(TypeError):
        Store(42)
    with pytest.raises(ValueError):
        Store("")
    with pytest.raises(ValueError):
        Store(str(tmp_path / "a\0b"))
