"""asyncio: waits are awaitable, keep the loop running, and cancelling the task cancels the wait
in the library, so that no thread is left behind to take the lock later.

Each test runs its own loop with ``asyncio.run`` (no plugin needed). The whole of each test is
bounded by PATIENCE only so that a broken binding fails instead of hanging; no assertion is
about how long anything took."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import fencelock

PATIENCE = 60


def run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, PATIENCE)

    return asyncio.run(bounded())


def _no_wait_threads_left() -> bool:
    """Every wait thread ends: one that delivered its result may still be on its way out."""
    for thread in threading.enumerate():
        if thread.name == "fencelock-wait":
            thread.join(timeout=30)
    return not any(t.name == "fencelock-wait" for t in threading.enumerate())


def test_await_and_async_with(store):
    async def main():
        holder = await store.acquire_async("job", ttl=30)
        assert holder.held()
        holder.release()
        async with store.acquire_async("job", ttl=30) as holder:
            assert holder.held()
        assert holder.closed
        return holder.token

    token = run(main())
    with store.acquire("job") as again:  # released by the async with
        assert again.token == token + 1


def test_try_once_raises_locked(store):
    holder = store.acquire("busy", ttl=60)

    async def main():
        with pytest.raises(fencelock.LockedError) as info:
            await store.acquire_async("busy")
        assert info.value.token == holder.token
        with pytest.raises(fencelock.LockTimeoutError):
            await store.acquire_async("busy", timeout=0.05)

    run(main())
    holder.release()


def test_a_wait_keeps_the_loop_running_and_is_granted_on_release(store):
    holder = store.acquire("busy", ttl=60)

    async def main():
        waiting = asyncio.ensure_future(store.acquire_async("busy", timeout=None))
        # The loop runs while the task waits: this coroutine releases the lock the task awaits.
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert not waiting.done()
        holder.release()
        async with await waiting as mine:
            return mine.token

    assert run(main()) == holder.token + 1


def _cancelled_wait_never_takes_the_lock(store, cancel_it):
    """Starts a waiting acquire_async on a held lock, ends it with ``cancel_it``, then frees the
    lock: the next grant must be the next token (no orphaned thread took one meanwhile)."""
    holder = store.acquire("contended", ttl=60)

    async def main():
        await cancel_it(store.acquire_async("contended", ttl=60, timeout=None))

    run(main())
    assert _no_wait_threads_left()
    holder.release()
    time.sleep(0.2)  # room for an orphaned wait to take the lock; none may exist
    with store.acquire("contended") as after:
        assert after.token == holder.token + 1
    (info,) = [lock for lock in store.locks() if lock.name == "contended"]
    assert info.token == holder.token + 1


def test_wait_for_running_out_cancels_the_wait(store):
    async def cancel_it(awaitable):
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(awaitable, 0.2)

    _cancelled_wait_never_takes_the_lock(store, cancel_it)


def test_task_cancel_cancels_the_wait(store):
    async def cancel_it(awaitable):
        task = asyncio.ensure_future(awaitable)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _cancelled_wait_never_takes_the_lock(store, cancel_it)


def test_a_grant_that_races_the_cancel_is_released(store):
    # The lock is free: the wait may be granted before the cancel lands. Either way, once the
    # task is cancelled, the lock is free.
    async def main():
        for _ in range(20):
            task = asyncio.ensure_future(store.acquire_async("race", timeout=None))
            await asyncio.sleep(0)
            task.cancel()
            try:
                holder = await task
            except asyncio.CancelledError:
                pass
            else:
                holder.release()
            with store.acquire("race"):  # never LockedError: no grant outlived its cancel
                pass

    run(main())


def test_wait_lost_async_returns_and_is_cancellable(store):
    async def main():
        holder = store.acquire("watched", ttl=60)
        task = asyncio.ensure_future(holder.wait_lost_async())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert holder.held()  # a cancelled wait changes nothing
        assert await holder.wait_lost_async(0.01) is False
        waiting = asyncio.ensure_future(holder.wait_lost_async(None))
        await asyncio.sleep(0.01)
        holder.release()
        assert await waiting is True

    run(main())
    assert _no_wait_threads_left()


def test_leaving_async_with_after_the_lease_was_lost_raises(store):
    async def main():
        with pytest.raises(fencelock.LockLostError):
            async with store.acquire_async("short", ttl=0.02) as holder:
                await holder.wait_lost_async()

    run(main())


def test_closing_the_store_ends_an_async_wait(store_path):
    store = fencelock.Store(store_path)
    holder = store.acquire("busy", ttl=60)

    async def main():
        task = asyncio.ensure_future(store.acquire_async("busy", timeout=None))
        await asyncio.sleep(0.05)
        store.close()
        with pytest.raises(ValueError, match="closed"):
            await task

    run(main())
    holder.release()
