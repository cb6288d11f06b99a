"""What an error says: the file it concerns as OSError says it, the lock it concerns and the wait
it gave up after as filelock's Timeout says them; never Rust's "(os error N)"."""

from __future__ import annotations

import errno
import os
import pickle

import pytest

import fencelock
from fencelock import Store


def test_a_failed_open_reads_as_oserror(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "locks.db"
    with pytest.raises(FileNotFoundError) as info:
        Store(path)
    err = info.value
    assert str(err) == f"[Errno {errno.ENOENT}] {os.strerror(errno.ENOENT)}: {str(path)!r}"
    assert str(err) == str(FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)))
    assert err.filename == str(path)
    assert "os error" not in err.message and str(path) in err.message
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_a_held_lock_names_the_lock(store, other_store):
    holder = other_store.acquire("payment-export", ttl=60)
    with pytest.raises(fencelock.LockedError) as info:
        store.acquire("payment-export")
    assert info.value.name == "payment-export"
    assert str(info.value).startswith("lock \"payment-export\" is held by pid ")
    assert info.value.token == holder.token


def test_a_timed_out_acquire_names_the_lock_and_the_wait(store, other_store):
    holder = other_store.acquire("payment-export", ttl=60)
    with pytest.raises(fencelock.LockTimeoutError) as info:
        store.acquire("payment-export", timeout=0.05)
    holder.release()
    err = info.value
    assert (err.name, err.timeout) == ("payment-export", 0.05)
    assert str(err) == "timed out after 0.05 s waiting for lock 'payment-export'"
    assert repr(err) == "LockTimeoutError(\"timed out after 0.05 s waiting for lock 'payment-export'\")"
