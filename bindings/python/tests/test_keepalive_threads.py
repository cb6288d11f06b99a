"""Keep-alive, learning of a lost lease, threads, and the GIL being released while C blocks."""

from __future__ import annotations

import threading
import time

import pytest

import fencelock
from fencelock import Store

# Generous bound on waits for events that must happen; never a pass/fail timing limit.
PATIENCE = 60


def test_keep_alive_holds_the_lease_past_its_ttl(store):
    holder = store.acquire("kept", ttl=1.2)
    holder.keep_alive()  # renews for the acquire ttl every 0.4 s
    time.sleep(3.0)  # 2.5 leases: without renewal it would have expired
    assert holder.held()
    with pytest.raises(fencelock.LockedError):
        store.acquire("kept")
    assert not holder.lost
    holder.release()
    assert holder.lost  # released counts as ended
    assert holder.wait_lost(0)
    store.acquire("kept").close()


def test_keep_alive_twice_changes_nothing(store):
    with store.acquire("twice", ttl=1) as holder:
        holder.keep_alive(0.9)
        holder.keep_alive(0.9)
        assert holder.held()


def test_loss_is_learned_through_lost_wait_lost_and_on_lost(store):
    holder = store.acquire("lossy", ttl=60)
    called = threading.Event()
    seen = []
    watcher = holder.on_lost(lambda h: (seen.append(h), called.set()))
    assert not holder.lost
    assert not holder.wait_lost(0.01)
    holder.extend(0.05)  # now let it run out
    assert holder.wait_lost(PATIENCE)  # a lease that ran out unrenewed counts as lost
    taker = store.acquire("lossy", ttl=60, timeout=PATIENCE)
    with pytest.raises(fencelock.LockLostError):
        holder.extend(5)  # the holder notices the loss
    assert holder.lost
    assert holder.wait_lost(PATIENCE)
    assert called.wait(PATIENCE)
    assert seen == [holder]
    watcher.join(PATIENCE)
    assert not watcher.is_alive()
    taker.close()
    holder.close()


def test_keep_alive_on_lost_not_called_after_own_release(store):
    holder = store.acquire("mine", ttl=1)
    called = threading.Event()
    holder.keep_alive(on_lost=lambda h: called.set())
    watchers = [t for t in threading.enumerate() if t.name == f"fencelock-watch-{holder.token}"]
    assert len(watchers) == 1
    holder.release()
    watchers[0].join(PATIENCE)
    assert not watchers[0].is_alive()
    assert not called.is_set()
    holder.close()


def test_dropped_holder_with_watcher_is_collected_and_released(store):
    import gc

    holder = store.acquire("dropped", ttl=60)
    token = holder.token
    watcher = holder.on_lost(lambda h: None)
    del holder
    gc.collect()
    watcher.join(PATIENCE)
    assert not watcher.is_alive()
    with store.acquire("dropped") as again:
        assert again.token > token


def test_waiting_acquire_releases_the_gil(store, other_store):
    holder = other_store.acquire("gil", ttl=60)
    entering = threading.Event()
    progress = []

    def worker():
        entering.wait(PATIENCE)
        # Pure-Python work needs the GIL: if the waiting acquire held it, this would stall and
        # the acquire below would time out instead of being granted.
        for i in range(200):
            progress.append(i)
            time.sleep(0.001)
        holder.release()

    thread = threading.Thread(target=worker)
    thread.start()
    entering.set()
    with store.acquire("gil", timeout=PATIENCE) as granted:
        assert granted.token > holder.token
    thread.join(PATIENCE)
    assert len(progress) == 200


def test_wait_lost_releases_the_gil(store):
    holder = store.acquire("w", ttl=60)
    thread = threading.Thread(target=lambda: (time.sleep(0.1), holder.release()))
    thread.start()
    assert holder.wait_lost()  # no timeout: woken by the release from the other thread
    thread.join(PATIENCE)


def test_closing_a_holder_ends_a_wait_lost_in_another_thread(store):
    holder = store.acquire("w", ttl=60)
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(holder.wait_lost()))
    thread.start()
    time.sleep(0.05)
    holder.close()  # releases, which ends the wait as a loss
    thread.join(PATIENCE)
    assert not thread.is_alive()
    assert outcome == [True]


def test_many_threads_distinct_locks_and_one_contended_lock(store):
    errors = []
    tokens = []
    counter_key = "counter"
    lock = threading.Lock()

    def work(n):
        try:
            with store.acquire(f"own-{n}", ttl=30) as own:
                own.put(f"own/{n}", str(n))
            for _ in range(5):
                with store.acquire("shared", ttl=30, timeout=PATIENCE) as shared:
                    current = store.get(counter_key)
                    value = int(current.value) if current else 0
                    shared.put(counter_key, str(value + 1))
                    with lock:
                        tokens.append(shared.token)
        except Exception as err:  # noqa: BLE001 - every failure is reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE * 5)
    assert not errors
    assert int(store.get(counter_key).value) == 30  # no lost update under the lock
    assert len(set(tokens)) == 30
    assert sorted(store.keys("own/")) == sorted(f"own/{n}".encode() for n in range(6))


def test_closing_a_store_while_a_thread_waits_in_it(store_path):
    store = Store(store_path)
    blocker = store.acquire("busy", ttl=60)
    outcome = []
    started = threading.Event()

    def waiter():
        started.set()
        try:
            store.acquire("busy", timeout=PATIENCE)
        except Exception as err:  # noqa: BLE001 - the assertion below checks which
            outcome.append(err)

    thread = threading.Thread(target=waiter)
    thread.start()
    started.wait(PATIENCE)
    time.sleep(0.05)
    store.close()  # ends the wait (its cancel fires); the C store is freed after it returns
    thread.join(PATIENCE)
    assert not thread.is_alive()
    assert len(outcome) == 1
    # A close that only waited for the call would leave it blocked for PATIENCE and a timeout.
    assert type(outcome[0]) is ValueError, outcome
    with pytest.raises(ValueError):
        store.get("k")
    assert blocker.held()  # the holder keeps its own reference to the store
    blocker.close()
