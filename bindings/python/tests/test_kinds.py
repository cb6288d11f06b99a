"""Semaphores, shared locks and atomic multi-lock acquires, in one process and across real
processes."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest
from conftest import spawn

import fencelock
from fencelock import LockKind, LockState, Store

HOLD_PERMIT = """
import sys, fencelock
store = fencelock.Store(sys.argv[1])
holder = store.acquire("pool", ttl=600, permits=2)
print("token", holder.token, flush=True)
sys.stdin.readline()
"""

WAIT_EXCLUSIVE = """
import sys, fencelock
store = fencelock.Store(sys.argv[1])
holder = store.acquire("config", ttl=600, timeout=60)
print("token", holder.token, flush=True)
sys.stdin.readline()
"""


def test_a_semaphore_grants_n_permits_each_with_a_higher_token(store):
    permits = [store.acquire("pool", permits=3) for _ in range(3)]
    assert [p.token for p in permits] == sorted(p.token for p in permits)
    assert len({p.token for p in permits}) == 3
    assert all(p.kind is LockKind.SEMAPHORE and p.permits == 3 for p in permits)
    with pytest.raises(fencelock.LockedError) as locked:
        store.acquire("pool", permits=3)
    assert locked.value.token in {p.token for p in permits}
    permits[0].release()
    again = store.acquire("pool", permits=3)
    assert again.token > permits[2].token
    assert permits[1].held() and not permits[0].held()
    for holder in (*permits, again):
        holder.close()


def test_another_permit_count_while_permits_are_live_is_refused(store):
    with store.acquire("pool", permits=2) as permit:
        before = store.locks()
        with pytest.raises(fencelock.PermitsMismatchError) as mismatch:
            store.acquire("pool", permits=5)
        assert (mismatch.value.permits, mismatch.value.requested) == (2, 5)
        assert mismatch.value.status == 18
        assert [(i.token, i.kind, i.permits) for i in store.locks()] == [
            (i.token, i.kind, i.permits) for i in before
        ]
        permit.put("k", b"v")
    with store.acquire("pool", permits=5) as permit:
        assert permit.permits == 5


def test_bad_kinds_fail_in_python(store):
    for permits in (0, -1, 1025):
        with pytest.raises(ValueError):
            store.acquire("pool", permits=permits)
    with pytest.raises(TypeError):
        store.acquire("pool", permits="2")
    with pytest.raises(TypeError):
        store.acquire("pool", shared=1)
    with pytest.raises(ValueError):
        store.acquire("pool", shared=True, permits=2)
    assert store.locks() == []


def test_shared_holders_share_and_exclude_an_exclusive_one(store):
    readers = [store.acquire("config", shared=True) for _ in range(3)]
    assert all(r.kind is LockKind.SHARED for r in readers)
    with pytest.raises(fencelock.LockedError):
        store.acquire("config")
    # A shared holder reads; its token still fences writes made with it.
    with pytest.raises(fencelock.InvalidArgumentError):
        readers[0].put("k", b"v")
    store.put("k", b"v", readers[0].token)
    kinds = {(i.kind, i.state) for i in store.locks() if i.name == "config"}
    assert kinds == {(LockKind.SHARED, LockState.HELD)}
    for reader in readers:
        reader.close()
    with store.acquire("config") as writer:
        assert writer.kind is LockKind.EXCLUSIVE
        with pytest.raises(fencelock.LockedError):
            store.acquire("config", shared=True)


def test_a_waiting_permit_acquire_gets_a_permit_let_go(store):
    first = store.acquire("pool", permits=1)
    got = []
    waiter = threading.Thread(target=lambda: got.append(store.acquire("pool", permits=1, timeout=60)))
    waiter.start()
    first.release()
    waiter.join()
    assert got[0].token > first.token
    with pytest.raises(fencelock.LockTimeoutError):
        store.acquire("pool", permits=1, timeout=0.01)
    got[0].close()


def test_asyncio_acquires_every_kind(store):
    async def main():
        a = await store.acquire_async("config", shared=True)
        async with store.acquire_async("config", shared=True, timeout=5) as b:
            assert b.token > a.token
        a.close()
        async with store.acquire_async("pool", permits=2, timeout=5) as p:
            assert p.kind is LockKind.SEMAPHORE

    asyncio.run(main())


def test_acquire_all_is_all_or_none_with_a_token_per_name(store, other_store):
    with other_store.acquire("b"):
        with pytest.raises(fencelock.LockedError):
            store.acquire_all(["a", "b"])
        assert [i.name for i in store.locks()] == ["b"]
        with pytest.raises(fencelock.LockTimeoutError):
            store.acquire_all(["a", "b"], timeout=0.01)
    holders = store.acquire_all(["a", "b", "c"], ttl=30)
    assert [h.name for h in holders] == ["a", "b", "c"]
    assert [h.token for h in holders] == [holders[0].token + i for i in range(3)]
    holders[1].release()
    assert holders[0].held() and holders[2].held()
    for holder in holders:
        holder.close()
    for bad in ([], ["a", "a"], "ab", ["a", ""]):
        with pytest.raises((ValueError, TypeError)):
            store.acquire_all(bad)


def test_acquire_all_waits_until_every_lock_is_free(store):
    held = store.acquire("b")
    got = []
    waiter = threading.Thread(target=lambda: got.append(store.acquire_all(["a", "b"], timeout=60)))
    waiter.start()
    held.release()
    waiter.join()
    assert [h.name for h in got[0]] == ["a", "b"]
    for holder in got[0]:
        holder.close()


def test_a_killed_process_frees_its_permit(store_path):
    with Store(store_path) as store:
        kids = [spawn(HOLD_PERMIT, str(store_path)) for _ in range(2)]
        try:
            tokens = []
            for kid in kids:
                line = kid.stdout.readline().split()
                assert line[:1] == ["token"], kid.stderr.read()
                tokens.append(int(line[1]))
            with pytest.raises(fencelock.LockedError):
                store.acquire("pool", permits=2)
            with pytest.raises(fencelock.PermitsMismatchError):
                store.acquire("pool", permits=3)
            os.kill(kids[0].pid, signal.SIGKILL)
            kids[0].wait()
            with store.acquire("pool", permits=2) as mine:
                assert mine.token > max(tokens)
                with pytest.raises(fencelock.LockedError):
                    store.acquire("pool", permits=2)
        finally:
            for kid in kids:
                kid.kill()
                kid.wait()
                kid.stdout.close()
                kid.stderr.close()
                kid.stdin.close()


def test_a_waiting_exclusive_process_goes_before_later_shared_acquires(store_path):
    with Store(store_path) as store:
        reader = store.acquire("config", shared=True)
        writer = spawn(WAIT_EXCLUSIVE, str(store_path))
        try:
            # Shared acquires join the reader until the writer's process is queued.
            while True:
                try:
                    store.acquire("config", shared=True).close()
                except fencelock.LockedError:
                    break
            reader.release()
            line = writer.stdout.readline().split()
            assert line[:1] == ["token"], writer.stderr.read()
            with pytest.raises(fencelock.LockedError) as locked:
                store.acquire("config", shared=True)
            assert locked.value.token == int(line[1])
            reader.close()
        finally:
            writer.kill()
            writer.wait()
            writer.stdout.close()
            writer.stderr.close()
            writer.stdin.close()
