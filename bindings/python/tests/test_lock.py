"""store.lock(...): a reusable lock object used as ``with``, ``async with`` and a decorator."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest

import fencelock

# Generous bound on waits for events that must happen; never a pass/fail timing limit.
PATIENCE = 60


def test_each_entry_acquires_a_new_lease_and_releases_it(store):
    lock = store.lock("job", ttl=30)
    assert lock.holder is None and lock.token is None
    with lock as first:
        assert lock.holder is first and lock.token == first.token
        assert first.held()
        with pytest.raises(fencelock.LockedError):
            store.acquire("job")  # the entry's lease is the store's lock
    assert first.closed and lock.holder is None and lock.token is None
    store.acquire("job").close()  # free again
    with lock as second:
        assert second.token > first.token
        assert second is not first


def test_timeout_zero_tries_once_and_a_refusal_leaves_no_entry(store, other_store):
    lock = store.lock("busy")  # timeout=0 by default, as store.acquire
    with other_store.acquire("busy", ttl=30) as other:
        with pytest.raises(fencelock.LockedError) as refused, lock:
            pass
        assert refused.value.token == other.token
        assert lock.holder is None
        with pytest.raises(fencelock.LockTimeoutError), store.lock("busy", timeout=0.05):
            pass
    with lock as holder:
        assert holder.token > other.token


def test_reentering_in_the_same_thread_is_refused_at_once(store):
    # Without the refusal the nested entry would wait for its own lease: here for the whole
    # timeout, and for ever with timeout=None, the keep-alive renewing the outer lease.
    lock = store.lock("nested", timeout=PATIENCE)
    with lock as outer:
        with pytest.raises(RuntimeError, match="not reentrant"), lock:
            pass
        assert lock.holder is outer and outer.held()
    assert lock.holder is None

    @lock
    def recurse(depth: int) -> int:
        return recurse(depth - 1) if depth else 0

    with pytest.raises(RuntimeError, match="not reentrant"):
        recurse(1)
    assert lock.holder is None
    store.acquire("nested").close()  # the outer call released on the way out


def test_other_threads_share_the_object_each_with_a_lease_of_its_own(store):
    lock = store.lock("shared-object", timeout=PATIENCE)
    inside = threading.Event()
    let_go = threading.Event()
    seen = []

    def first() -> None:
        with lock as holder:
            seen.append(("first", holder.token))
            inside.set()
            let_go.wait(PATIENCE)
            seen.append(("first leaves", holder.token))

    def second() -> None:
        inside.wait(PATIENCE)
        seen.append(("second sees", lock.holder))  # the first thread's entry is not its own
        with lock as holder:
            seen.append(("second", holder.token))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    inside.wait(PATIENCE)
    let_go.set()
    for thread in threads:
        thread.join(PATIENCE)
    events = dict(seen)
    assert [event for event, _ in seen if event != "second sees"] == ["first", "first leaves", "second"]
    assert events["second sees"] is None
    assert events["second"] > events["first"]


def test_a_decorated_function_runs_inside_an_entry(store):
    lock = store.lock("decorated")

    @lock
    def export(value: str) -> tuple[int | None, str]:
        """Exports value."""
        with pytest.raises(fencelock.LockedError):
            store.acquire("decorated")
        store.put("out", value, lock.token)
        return lock.token, value

    token, value = export("a")
    assert value == "a" and isinstance(token, int)
    assert export.__name__ == "export" and export.__doc__ == "Exports value."
    again, _ = export("b")
    assert again > token
    assert store.get("out") == (b"b", again)

    @lock
    def fails() -> None:
        raise KeyError("inside")

    with pytest.raises(KeyError):
        fails()
    assert lock.holder is None
    store.acquire("decorated").close()  # released although the function raised


def test_keep_alive_renews_the_lease_while_the_entry_lasts(store):
    with store.lock("kept", ttl=1.2) as holder:  # keep_alive=True: renewed every 0.4 s
        time.sleep(3.0)  # 2.5 leases: without renewal it would have expired
        assert holder.held()
        with pytest.raises(fencelock.LockedError):
            store.acquire("kept")
    # Without keep-alive the lease runs out inside the block, and leaving it says so.
    unkept = store.lock("unkept", ttl=60, keep_alive=False)
    with pytest.raises(fencelock.LockLostError), unkept as holder:
        holder.extend(0.05)
        assert holder.wait_lost(PATIENCE)


def test_async_with_and_async_decorator(store):
    lock = store.lock("async-job", timeout=PATIENCE)
    inside = 0
    most_inside = 0
    tokens = []

    @lock
    async def job() -> int | None:
        nonlocal inside, most_inside
        inside += 1
        most_inside = max(most_inside, inside)
        await asyncio.sleep(0.05)  # let the other task try meanwhile
        inside -= 1
        tokens.append(lock.token)
        return lock.token

    async def main() -> None:
        entered, trying = asyncio.Event(), asyncio.Event()
        seen = []

        async def other() -> int:
            await entered.wait()
            seen.append(lock.holder)  # None: main's entry is not this task's
            trying.set()
            async with lock as mine:  # waits for main's lease to go; not refused
                return mine.token

        waiter = asyncio.ensure_future(other())  # made before main's entry: a context of its own
        async with lock as holder:
            assert lock.token == holder.token
            entered.set()
            await trying.wait()  # other's entry has begun: it waits in the library
            with pytest.raises(RuntimeError, match="not reentrant"):
                async with lock:
                    pass
            with pytest.raises(RuntimeError, match="not reentrant"), lock:  # the same task, sync
                pass
        assert holder.closed and lock.holder is None
        assert await waiter > holder.token and seen == [None]
        # Two tasks of one thread enter the same object: each waits for a lease of its own.
        results = await asyncio.gather(job(), job())
        assert sorted(results) == sorted(tokens) and len(set(tokens)) == 2

    asyncio.run(main())
    assert most_inside == 1
    store.acquire("async-job").close()


def test_shared_and_permits_as_acquire(store):
    readers = store.lock("config", shared=True)
    with readers as a, store.lock("config", shared=True) as b:
        assert a.kind is b.kind is fencelock.LockKind.SHARED
    with store.lock("gpu", permits=2) as permit:
        assert permit.kind is fencelock.LockKind.SEMAPHORE and permit.permits == 2


def test_arguments_are_checked_when_the_lock_is_made(store):
    with pytest.raises(ValueError):
        store.lock("")
    with pytest.raises(ValueError):
        store.lock("x", ttl=-1)
    with pytest.raises(ValueError):
        store.lock("x", timeout=-1)
    with pytest.raises(TypeError):
        store.lock("x", keep_alive="yes")
    with pytest.raises(ValueError):
        store.lock("x", shared=True, permits=2)
    with pytest.raises(TypeError):
        store.lock("x")(42)


def test_a_generator_function_is_refused_as_its_body_would_run_unlocked(store):
    lock = store.lock("gen")

    def rows():
        yield lock.token

    async def rows_async():
        yield lock.token

    for fn in (rows, rows_async):
        with pytest.raises(TypeError, match="generator function"):
            lock(fn)
    assert repr(store.lock("x")).startswith("<fencelock.Lock 'x' of <fencelock.Store ")


def test_an_async_callable_object_or_partial_runs_its_body_inside_the_entry(store):
    # inspect.iscoroutinefunction is false for an object with `async def __call__` and for a
    # partial of one: decorated as sync, the entry would end before the coroutine ran.
    lock = store.lock("async-object")

    class Job:
        async def __call__(self, tag: str) -> tuple[int | None, str]:
            with pytest.raises(fencelock.LockedError):
                store.acquire("async-object")
            return lock.token, tag

    for decorated, args in ((lock(Job()), ("plain",)), (lock(functools.partial(Job(), "bound")), ())):
        token, tag = asyncio.run(decorated(*args))
        assert isinstance(token, int) and tag in ("plain", "bound")
        assert lock.holder is None
        store.acquire("async-object").close()  # released on return


def test_a_generator_callable_object_is_refused_as_a_generator_function(store):
    class Rows:
        def __call__(self):
            yield store.lock("gen-object").token

    with pytest.raises(TypeError, match="generator function"):
        store.lock("gen-object")(Rows())


def test_a_sync_callable_that_returns_a_coroutine_is_refused_at_the_call(store):
    # What no inspection up front can tell: its coroutine would run after the release.
    lock = store.lock("returns-coroutine")
    ran = []

    async def body() -> None:
        ran.append(lock.token)

    decorated = lock(lambda: body())
    with pytest.raises(TypeError, match="returned a coroutine"):
        decorated()
    assert ran == [] and lock.holder is None
    store.acquire("returns-coroutine").close()  # released
