"""Metrics, grant history and the observer: what the store counted, who held a lock with which
token and how each lease ended, and what an observer hears, including across real processes."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from conftest import spawn

import fencelock
from fencelock import Ending, EventKind, LockKind, Scope, Store

PATIENCE = 60
# The timeout of the waiting acquire that times out in the metrics test.
TIMEOUT = 0.05
# Times of the record are wall-clock estimates in milliseconds: compared with the test's own
# clock readings, they may be off by a little either way (this is no limit on how long anything takes).
SLACK = timedelta(seconds=1)


def endings(store: Store, name: str) -> list[tuple[int, Ending]]:
    return [(entry.token, entry.ending) for entry in store.history(name)]


def test_the_walkthrough_is_on_record_paused_holder_taken_over_then_released(store):
    before = datetime.now(timezone.utc)
    # A is granted payment-export and pauses past its TTL, still holding on.
    a = store.acquire("payment-export", ttl=0.15)
    time.sleep(0.3)
    b = store.acquire("payment-export", ttl=60, timeout=PATIENCE)
    b.put("report", b"fresh")
    with pytest.raises(fencelock.LockLostError):
        a.put("report", b"stale")
    history = store.history("payment-export")
    assert [(e.token, e.ending) for e in history] == [(a.token, Ending.TAKEN_OVER), (b.token, Ending.HELD)]
    first, second = history
    assert first.name == "payment-export"
    assert first.pid == os.getpid()
    assert first.kind is LockKind.EXCLUSIVE and first.permits == 0
    assert first.granted is not None and first.granted.tzinfo is not None
    assert first.granted >= before - SLACK
    assert first.expires is not None and first.ended is not None
    assert first.expires <= first.ended, "taken over after its expiry"
    assert first.recorded is not None
    assert second.recorded is None, "a current grant is not recorded yet"
    assert second.ended is None
    # B releases; the next grant records that, with the time of the release.
    releasing = datetime.now(timezone.utc)
    b.release()
    released = datetime.now(timezone.utc)
    c = store.acquire("payment-export", ttl=60)
    assert endings(store, "payment-export") == [
        (a.token, Ending.TAKEN_OVER),
        (b.token, Ending.RELEASED),
        (c.token, Ending.HELD),
    ]
    ended = store.history("payment-export")[1].ended
    assert ended is not None, "the release's time is known"
    assert releasing - SLACK <= ended <= released + SLACK
    assert str(Ending.TAKEN_OVER) == "taken-over" and f"{Ending.HOLDER_DIED}" == "holder-died"
    a.close()
    c.close()


def test_metrics_count_grants_refusals_waits_and_stale_writes(store, other_store):
    start = store.metrics()
    assert start.scope is Scope.STORE and str(start.scope) == "store"
    assert start.since <= datetime.now(timezone.utc)
    holder = other_store.acquire("m", ttl=60)  # counted too: the counters are the store's
    with pytest.raises(fencelock.LockedError):
        store.acquire("m")
    with pytest.raises(fencelock.LockTimeoutError):
        store.acquire("m", timeout=TIMEOUT)
    holder.put("k", b"v")
    stale = holder.token
    holder.release()
    newer = store.acquire("m", ttl=60, timeout=PATIENCE)
    newer.put("k", b"newer")
    with pytest.raises(fencelock.StaleTokenError):
        store.put("k", b"stale", stale)
    m = store.metrics()
    assert m.grants - start.grants == 2
    assert m.refused_locked - start.refused_locked == 1
    assert m.refused_timeout - start.refused_timeout == 1
    assert m.stale_writes - start.stale_writes == 1
    assert m.releases - start.releases == 1
    assert m.ended_released - start.ended_released == 1
    # The timed-out acquire waited, at least its timeout (less the microseconds between the
    # library setting its deadline and starting its clock); the one granted at once did not.
    assert m.waits - start.waits == 1
    assert m.wait_time - start.wait_time >= TIMEOUT - 0.001
    assert isinstance(m.wait_buckets, tuple) and len(m.wait_buckets) == 8
    assert sum(m.wait_buckets) == m.waits
    # The two writes (grants commit nothing: the leases are in the store's shared memory).
    assert m.committed_ops - start.committed_ops >= 2
    assert start.commits < m.commits <= m.committed_ops
    assert m.leases_lost == m.ended_expired + m.ended_taken_over + m.ended_holder_died
    with pytest.raises(AttributeError):
        m.grants = 0  # type: ignore[misc]  # frozen
    text = store.metrics_prometheus()
    assert "fencelock_grants_total{" in text
    assert f'store="{store.path}"' in text
    assert 'reason="stale_token"}' in text
    newer.close()


def test_a_single_process_store_counts_its_own_operations(tmp_path):
    with Store(tmp_path / "single.db", mode="single-process") as store:
        store.acquire("x", ttl=5).close()
        m = store.metrics()
    assert (m.scope, m.grants, m.releases) == (Scope.PROCESS, 1, 1)


def test_a_store_that_keeps_no_history_still_counts_how_leases_ended(store_path):
    with Store(store_path, history=False) as store:
        before = store.metrics()
        store.acquire("quiet", ttl=5).close()
        second = store.acquire("quiet", ttl=5)
        assert endings(store, "quiet") == [(second.token, Ending.HELD)]
        assert store.metrics().ended_released - before.ended_released == 1
        second.close()
    with pytest.raises(TypeError):
        Store(store_path, history="no")


HOLD = """
import sys, fencelock
store = fencelock.Store(sys.argv[1])
holder = store.acquire("nightly", ttl=3600)
print(holder.token, flush=True)
sys.stdin.readline()  # SIGKILLed here
"""


def test_a_killed_holder_is_on_record_and_its_grant_counts_in_the_parents_metrics(store):
    before = store.metrics()
    child = spawn(HOLD, str(store.path))
    try:
        line = child.stdout.readline()
        assert line.strip().isdigit(), child.stderr.read()
        token = int(line)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # The lease has an hour left, but its process is dead: the next grant replaces it.
        with store.acquire("nightly", ttl=60, timeout=PATIENCE) as nxt:
            history = store.history("nightly")
            assert [(e.token, e.ending) for e in history] == [
                (token, Ending.HOLDER_DIED),
                (nxt.token, Ending.HELD),
            ]
            assert history[0].pid == child.pid
            assert history[0].recorded is not None
            after = store.metrics()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert after.scope is Scope.STORE
    assert after.grants - before.grants == 2, "the child's grant and the parent's"
    assert after.ended_holder_died - before.ended_holder_died == 1
    assert after.leases_lost - before.leases_lost == 1


def summary(events):
    return [
        (
            str(e.kind),
            e.name,
            e.token,
            str(e.lock_kind),
            None if e.error is None else type(e.error).__name__,
        )
        for e in events
    ]


def test_an_observer_hears_grants_refusals_losses_and_releases_in_order(store):
    events = []
    store.set_observer(events.append)
    a = store.acquire("o", ttl=0.1)
    with pytest.raises(fencelock.LockedError):
        store.acquire("o")
    # Waits out A's lease, from a thread of its own: this thread's wait for its own lease would
    # be refused.
    with ThreadPoolExecutor(1) as waiter:
        b = waiter.submit(store.acquire, "o", ttl=60, timeout=PATIENCE).result()
    with pytest.raises(fencelock.LockLostError):
        a.put("k", b"v")
    a.close()  # a lease known to be lost is not told again as released
    b.release()
    assert summary(events) == [
        ("acquire", "o", a.token, "exclusive", None),
        ("acquire", "o", 0, "exclusive", "LockedError"),
        ("acquire", "o", b.token, "exclusive", None),
        ("lost", "o", a.token, "exclusive", None),
        ("release", "o", b.token, "exclusive", None),
    ]
    granted_a, refused, granted_b, lost, release = events
    assert isinstance(events[0], fencelock.Event)
    assert granted_a.kind is EventKind.ACQUIRE and granted_a.waited == 0.0
    assert isinstance(refused.error, fencelock.LockedError) and refused.waited == 0.0
    assert granted_b.waited > 0
    assert lost.kind is EventKind.LOST and lost.held > 0
    assert release.kind is EventKind.RELEASE and release.held > 0
    # Kinds and permits of other acquires, and an acquire from another thread.
    events.clear()
    permit = store.acquire("pool", permits=3)
    worker = threading.Thread(target=lambda: store.acquire("shared", shared=True).close())
    worker.start()
    worker.join()
    permit.close()
    acquires = [e for e in events if e.kind is EventKind.ACQUIRE]
    assert [(e.name, e.lock_kind, e.permits) for e in acquires] == [
        ("pool", LockKind.SEMAPHORE, 3),
        ("shared", LockKind.SHARED, 0),
    ]
    releases = [e for e in events if e.kind is EventKind.RELEASE]
    assert [(e.name, e.lock_kind, e.permits) for e in releases] == [
        ("shared", LockKind.SHARED, 0),
        ("pool", LockKind.SEMAPHORE, 3),
    ]
    # None removes the observer.
    store.set_observer(None)
    events.clear()
    store.acquire("o").close()
    assert events == []


def test_an_exception_in_the_observer_does_not_break_the_operation(store, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    def broken(event):
        raise RuntimeError(f"observer failed on {event.kind}")

    store.set_observer(broken)
    holder = store.acquire("x", ttl=60)
    assert holder.held()
    holder.release()
    assert store.acquire("x").token > holder.token  # released for real
    assert [str(r.exc_value) for r in reported][:2] == [
        "observer failed on acquire",
        "observer failed on release",
    ]
    assert all(isinstance(r.exc_value, RuntimeError) for r in reported)
    # Replaced: the new function hears the next events, the broken one no more.
    heard = []
    store.set_observer(heard.append)
    count = len(reported)
    store.acquire("y").close()
    assert len(reported) == count
    assert [str(e.kind) for e in heard] == ["acquire", "release"]
    store.set_observer(None)


def test_the_observer_outlives_the_store_while_its_holders_live(store_path):
    heard = []
    store = Store(store_path)
    store.set_observer(heard.append)
    holder = store.acquire("kept", ttl=60)
    store.close()
    del store
    gc.collect()
    # The holder's release still tells the observer (the callback is kept with the holder).
    holder.release()
    assert [(str(e.kind), e.name) for e in heard] == [("acquire", "kept"), ("release", "kept")]
    holder.close()


def test_bad_input(store):
    with pytest.raises(fencelock.InvalidArgumentError):
        store.history("")
    with pytest.raises(TypeError):
        store.history(b"name")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.history("a\0b")
    with pytest.raises(TypeError):
        store.set_observer("not callable")  # type: ignore[arg-type]
    assert store.history("never-granted") == []
    store.close()
    with pytest.raises(ValueError):
        store.metrics()
    with pytest.raises(ValueError):
        store.history("x")
    with pytest.raises(ValueError):
        store.set_observer(None)
