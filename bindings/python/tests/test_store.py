"""Store and Holder: every call of the API, as a user relies on it."""

from __future__ import annotations

import gc
import os
import time
from datetime import datetime, timedelta, timezone

import pytest

import fencelock
from fencelock import Fenced, LockState, Mode, Store


def test_acquire_release_and_tokens_grow(store):
    first = store.acquire("payment-export", ttl=5)
    assert first.name == "payment-export"
    assert first.token >= 1
    assert first.held()
    with pytest.raises(fencelock.LockedError):
        store.acquire("payment-export")
    first.release()
    assert not first.held()
    first.release()  # idempotent
    second = store.acquire("payment-export", ttl=timedelta(seconds=5))
    assert second.token > first.token
    other = store.acquire("another-lock")
    assert other.token > second.token
    second.close()
    other.close()


def test_holder_context_manager_releases(store):
    with store.acquire("job") as holder:
        assert holder.held()
        token = holder.token
    assert holder.closed
    assert holder.token == token and holder.name == "job"  # still readable
    with store.acquire("job") as again:
        assert again.token > token


def test_put_get_delete_keys_with_tokens(store):
    holder = store.acquire("writer")
    assert store.get(b"a/1") is None
    store.put(b"a/1", b"one", holder.token)
    store.put("a/2", "two", holder.token)  # str key and value: UTF-8
    store.put(bytearray(b"b/1"), memoryview(b"\x00\xffbin"), holder.token)
    store.put("a/empty", b"", holder.token)  # a zero-length value is a value
    assert store.get("a/1") == Fenced(b"one", holder.token)
    assert store.get(b"a/2").value == b"two"
    assert store.get("b/1") == (b"\x00\xffbin", holder.token)
    assert store.get("a/empty") == Fenced(b"", holder.token)
    assert store.keys() == [b"a/1", b"a/2", b"a/empty", b"b/1"]
    assert store.keys("a/") == [b"a/1", b"a/2", b"a/empty"]
    assert store.keys(b"zz") == []
    assert store.delete("a/1", holder.token) is True
    assert store.delete("a/1", holder.token) is False
    assert store.get("a/1") is None
    assert store.keys("a/") == [b"a/2", b"a/empty"]


def test_stale_token_is_refused_and_data_stays(store):
    old = store.acquire("lock", ttl=5)
    old_token = old.token
    old.release()
    new = store.acquire("lock", ttl=5)
    store.put("k", b"new", new.token)
    with pytest.raises(fencelock.StaleTokenError) as info:
        store.put("k", b"old", old_token)
    assert info.value.token == old_token
    assert info.value.highest == new.token
    assert info.value.status == 2
    with pytest.raises(fencelock.StaleTokenError):
        store.delete("k", old_token)
    assert store.get("k") == Fenced(b"new", new.token)
    store.put("k", b"newer", new.token)  # an equal token is accepted
    assert store.get("k").value == b"newer"


def test_holder_put_and_delete(store):
    with store.acquire("h") as holder:
        holder.put("x", b"1")
        assert store.get("x") == Fenced(b"1", holder.token)
        assert holder.delete("x") is True
        assert holder.delete("x") is False
        assert store.get("x") is None
        holder.release()
        with pytest.raises(fencelock.LockLostError) as info:
            holder.put("x", b"2")
        assert info.value.token == holder.token
        assert store.get("x") is None


def test_acquire_and_put_is_one_step(store):
    holder = store.acquire_and_put("exporter", "state", b"started", ttl=5)
    assert store.get("state") == Fenced(b"started", holder.token)
    with pytest.raises(fencelock.LockedError):
        store.acquire_and_put("exporter", "state", b"second")
    assert store.get("state").value == b"started"  # neither happened
    holder.close()


def test_extend(store):
    holder = store.acquire("ext", ttl=5)
    holder.extend(60)
    holder.extend(timedelta(minutes=2))
    (info,) = [lock for lock in store.locks() if lock.name == "ext"]
    assert info.remaining > 60
    holder.release()
    with pytest.raises(fencelock.LockLostError):
        holder.extend(5)


def test_holder_remaining(store):
    holder = store.acquire("rem", ttl=60)
    assert 0 < holder.remaining <= 60
    assert isinstance(holder.remaining, float)
    brief = store.acquire("rem-brief", ttl=0.05)
    assert brief.remaining <= 0.05
    time.sleep(0.15)  # the 50 ms lease runs out
    assert brief.remaining == 0.0
    holder.close()
    with pytest.raises(ValueError, match="closed"):
        holder.remaining  # noqa: B018 - the property is the call under test


def test_fence(store):
    a = store.acquire("f")
    a.release()
    b = store.acquire("f")
    assert store.fence_token("bucket") is None
    store.fence("bucket", b.token)
    store.fence("bucket", b.token)  # equal passes
    assert store.fence_token("bucket") == b.token
    with pytest.raises(fencelock.StaleTokenError) as info:
        store.fence("bucket", a.token)
    assert (info.value.token, info.value.highest) == (a.token, b.token)


def test_locks_lists_records(store):
    before = datetime.now(timezone.utc)
    held = store.acquire("held-lock", ttl=30)
    released = store.acquire("released-lock", ttl=30)
    released.release()
    locks = {lock.name: lock for lock in store.locks()}
    assert set(locks) == {"held-lock", "released-lock"}
    info = locks["held-lock"]
    assert isinstance(info, fencelock.LockInfo)
    assert info.token == held.token
    assert info.pid == os.getpid()
    assert info.state is LockState.HELD
    assert 0 < info.remaining <= 30
    assert info.granted.tzinfo is not None and info.expires > info.granted
    assert info.granted > before - timedelta(minutes=5)
    assert locks["released-lock"].state is LockState.RELEASED
    held.close()


def test_lock_names_keys_are_unicode(store):
    with store.acquire("ünïcødé/锁") as holder:
        holder.put("ключ", "значение")
        assert store.get("ключ").value == "значение".encode()
        assert [lock.name for lock in store.locks()] == ["ünïcødé/锁"]


def test_store_accepts_path_types_and_reopens(tmp_path):
    path = tmp_path / "p.db"
    with Store(path) as one:
        holder = one.acquire("x")
        one.put("k", b"v", holder.token)
        holder.close()
        assert one.path == str(path)
        assert one.mode is Mode.MULTI_PROCESS
    with Store(str(path)) as two:
        assert two.get("k").value == b"v"
    with Store(os.fsencode(path), mode="multi-process") as three:
        assert three.keys() == [b"k"]


def test_single_process_mode_and_max_value_len(tmp_path):
    with Store(tmp_path / "s.db", mode=Mode.SINGLE_PROCESS, max_value_len=8) as store:
        assert store.mode is Mode.SINGLE_PROCESS
        with store.acquire("x") as holder:
            holder.put("small", b"12345678")
            with pytest.raises(fencelock.InvalidArgumentError):
                holder.put("big", b"123456789")
    with Store(tmp_path / "t.db", mode="single_process") as store:
        assert store.mode is Mode.SINGLE_PROCESS


def test_two_stores_on_one_file_share_locks(store_path):
    with Store(store_path) as one, Store(store_path) as two:
        holder = one.acquire("shared", ttl=30)
        with pytest.raises(fencelock.LockedError) as info:
            two.acquire("shared")
        assert info.value.token == holder.token
        holder.release()
        two.acquire("shared").close()


def test_closed_store_raises_valueerror_not_crash(store_path):
    store = Store(store_path)
    store.close()
    store.close()  # idempotent
    assert store.closed
    for call in (
        lambda: store.acquire("x"),
        lambda: store.get("k"),
        lambda: store.put("k", b"v", 1),
        lambda: store.keys(),
        lambda: store.locks(),
        lambda: store.fence("r", 1),
    ):
        with pytest.raises(ValueError, match="closed"):
            call()
    with pytest.raises(ValueError), store:
        pass


def test_closed_holder_raises_valueerror(store):
    holder = store.acquire("x")
    holder.close()
    holder.close()
    holder.release()  # idempotent even when closed
    for call in (holder.held, lambda: holder.put("k", b"v"), lambda: holder.extend(1), lambda: holder.lost):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_holders_outlive_their_store(store_path):
    store = Store(store_path)
    holder = store.acquire("survivor", ttl=30)
    store.close()
    assert holder.held()
    holder.put("k", b"after close")
    holder.extend(30)
    holder.release()
    assert not holder.held()
    with Store(store_path) as again:
        assert again.get("k").value == b"after close"
        again.acquire("survivor").close()


def test_dropped_holder_is_released_by_its_finalizer(store):
    holder = store.acquire("dropped", ttl=60)
    token = holder.token
    del holder
    gc.collect()
    with store.acquire("dropped") as again:
        assert again.token > token


def test_store_finalizer_closes(store_path):
    store = Store(store_path)
    finalizer = store._finalizer
    del store
    gc.collect()
    assert not finalizer.alive


def test_versions():
    assert fencelock.library_version() == fencelock.__version__
    assert isinstance(fencelock.__version__, str)
    major, minor, patch = map(int, fencelock.library_version().split("."))
    assert fencelock.library_version_number() == major * 1000000 + minor * 1000 + patch


def test_repr(store):
    with store.acquire("r") as holder:
        assert "r" in repr(holder) and str(holder.token) in repr(holder)
    assert "closed" in repr(holder)
    assert "Store" in repr(store)


def test_a_read_only_store_reads_and_refuses_writes(tmp_path):
    path = tmp_path / "locks.db"
    with Store(path) as store:
        holder = store.acquire("job")
        holder.put("k", b"v")
        with Store(path, read_only=True) as reader:
            assert reader.get("k") == Fenced(b"v", holder.token)
            assert [lock.name for lock in reader.locks()] == ["job"]
            with pytest.raises(fencelock.InvalidArgumentError, match="read-only"):
                reader.acquire("other")
            with pytest.raises(fencelock.InvalidArgumentError, match="read-only"):
                reader.put("k", b"w", holder.token)
        holder.close()
    missing = tmp_path / "missing.db"
    with pytest.raises(fencelock.FencelockError):
        Store(missing, read_only=True)
    assert not missing.exists()
