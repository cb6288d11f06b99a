"""Leader election: one leader at a time across processes, a deposed leader's writes refused,
observers see every change in order (sync and async), resign hands over at once, and a campaign
cancelled while it waits leaves no trace.

No assertion is about how long anything took: a hand-over that did not happen "at once" shows
as a candidate still waiting behind a lease of ten minutes, which PATIENCE turns into a failure
instead of a hang."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading

import pytest
from conftest import PACKAGE_SOURCE, spawn

import fencelock
from fencelock import Fenced, Leader, Store

PATIENCE = 60
LONG_TTL = 600  # a lease nobody waits out: a hand-over must come from a resign


def test_campaign_proclaim_and_fenced_writes(store):
    assert store.leader("scheduler") is None
    watch = store.observe("scheduler")
    with store.campaign("scheduler", b"node-a", ttl=LONG_TTL) as leadership:
        assert leadership.term > 0 and leadership.name == "scheduler"
        assert not leadership.is_lost
        assert leadership.wait_lost(0) is False
        first = watch.next(PATIENCE)
        assert isinstance(first, Leader)
        assert (first.term, first.version, first.value, first.pid) == (
            leadership.term,
            1,
            b"node-a",
            os.getpid(),
        )
        leadership.proclaim("node-a:8080")
        assert leadership.value == b"node-a:8080"
        second = watch.next(PATIENCE)
        assert second is not None and (second.term, second.version, second.value) == (
            leadership.term,
            2,
            b"node-a:8080",
        )
        assert store.leader("scheduler") == second
        leadership.put("schedule", b"by a")
        assert store.get("schedule") == Fenced(b"by a", leadership.term)
        assert leadership.delete("schedule") is True
        leadership.fence("s3://bucket/schedule.json")
        assert store.fence_token("s3://bucket/schedule.json") == leadership.term
    assert leadership.is_lost
    assert store.leader("scheduler") is None
    assert watch.next(0) is None  # a resign is no new leader
    watch.close()
    assert list(watch) == []  # a closed watch ends the iteration


def test_bad_arguments_are_refused_before_anything_changes(store):
    with pytest.raises(ValueError):
        store.campaign("", b"a")
    with pytest.raises(TypeError):
        store.campaign("scheduler", 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.campaign("scheduler", b"a", timeout=-1)
    with pytest.raises(fencelock.InvalidArgumentError):
        store.campaign("scheduler", b"a", ttl=3, margin=3)  # a margin over half the lease
    assert store.leader("scheduler") is None
    assert store.locks() == []


def test_resign_hands_over_at_once(store, other_store):
    first = store.campaign("scheduler", b"a", ttl=LONG_TTL)
    won: list[fencelock.Leadership] = []
    waiter = threading.Thread(
        target=lambda: won.append(other_store.campaign("scheduler", b"b", ttl=LONG_TTL))
    )
    waiter.start()
    while not store.waiters("scheduler"):
        threading.Event().wait(0.005)
    first.resign()
    waiter.join(PATIENCE)
    assert won, "the second candidate still waits after the leader resigned"
    second = won[0]
    assert second.term > first.term
    assert first.is_lost and not second.is_lost
    with pytest.raises(fencelock.LockLostError):
        first.put("schedule", b"late")
    second.put("schedule", b"by b")
    leader = store.leader("scheduler")
    assert leader is not None and (leader.term, leader.value) == (second.term, b"b")
    second.close()
    first.close()


def test_cancelled_campaign_leaves_no_trace(store, other_store):
    leadership = store.campaign("scheduler", b"a", ttl=LONG_TTL)
    before = {(lock.name, lock.token, lock.kind) for lock in store.locks()}
    with pytest.raises(fencelock.LockTimeoutError):
        other_store.campaign("scheduler", b"b", timeout=0.05)

    async def cancelled() -> None:
        task = asyncio.ensure_future(other_store.campaign_async("scheduler", b"c"))
        while not store.waiters("scheduler"):
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancelled(), PATIENCE))
    assert store.waiters("scheduler") == []
    assert {(lock.name, lock.token, lock.kind) for lock in store.locks()} == before
    leader = store.leader("scheduler")
    assert leader is not None and (leader.term, leader.value) == (leadership.term, b"a")
    term = leadership.term
    leadership.close()
    assert store.leader("scheduler") is None
    # The next campaign is granted: no cancelled candidate stands in the queue before it.
    with other_store.campaign("scheduler", b"d", timeout=PATIENCE) as next_leader:
        assert next_leader.term > term


def test_observe_in_asyncio_sees_every_change_in_order(store, other_store):
    async def main() -> None:
        seen: list[tuple[int, int, bytes]] = []

        async def told(count: int) -> None:
            while len(seen) < count:
                await asyncio.sleep(0.005)

        with store.observe("scheduler") as watch:

            async def observe() -> None:
                async for leader in watch:
                    seen.append((leader.term, leader.version, leader.value))

            observer = asyncio.ensure_future(observe())
            async with other_store.campaign_async("scheduler", b"a") as first:
                await told(1)
                first.proclaim(b"a2")
                await told(2)
            async with other_store.campaign_async("scheduler", b"b") as second:
                await told(3)
            observer.cancel()  # ends the wait in the library
            with pytest.raises(asyncio.CancelledError):
                await observer
        assert second.term > first.term
        assert seen == [(first.term, 1, b"a"), (first.term, 2, b"a2"), (second.term, 1, b"b")]

    asyncio.run(asyncio.wait_for(main(), PATIENCE))


CANDIDATE = """
import os, sys, fencelock
path, marker, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
with fencelock.Store(path) as store:
    for _ in range(rounds):
        with store.campaign("scheduler", str(os.getpid()), ttl=30, timeout=60) as leadership:
            # One leader at a time: the marker exists only while someone leads.
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            leadership.put("leader", str(os.getpid()))
            for _ in range(20):
                leadership.put("count", b"x")
            os.close(fd)
            os.unlink(marker)
            print("term", leadership.term, flush=True)
"""


def test_one_leader_at_a_time_across_processes(store_path, tmp_path):
    Store(store_path).close()  # created before the candidates race to
    with Store(store_path) as store, store.observe("scheduler") as watch:
        candidates = [spawn(CANDIDATE, str(store_path), str(tmp_path / "leading"), "4") for _ in range(3)]
        outputs = [c.communicate(timeout=PATIENCE) for c in candidates]
        for candidate, (_, err) in zip(candidates, outputs):
            assert candidate.returncode == 0, err
        terms = sorted(int(line.split()[1]) for text, _ in outputs for line in text.splitlines())
        assert len(terms) == 12 and len(set(terms)) == 12
        # The observer saw every term, in order (each began with version 1).
        seen = []
        while len(seen) < 12:
            leader = watch.next(PATIENCE)
            assert leader is not None
            assert leader.version == 1
            seen.append(leader.term)
        assert seen == terms


DEPOSED = """
import sys, fencelock
store = fencelock.Store(sys.argv[1])
leadership = store.campaign("scheduler", b"a", ttl=0.6)
print("leading", leadership.term, flush=True)
sys.stdin.readline()  # SIGSTOPped here; the parent writes a line after SIGCONT
print("is_lost", leadership.is_lost, flush=True)
try:
    leadership.put("schedule", b"late write by a")
    print("put: ok", flush=True)
except fencelock.LockLostError:
    print("put: LockLostError", flush=True)
try:
    store.put("schedule", b"late write by a", leadership.term)
    print("store.put: ok", flush=True)
except fencelock.StaleTokenError:
    print("store.put: StaleTokenError", flush=True)
leadership.close()
"""


def test_deposed_leader_write_is_refused(store_path):
    Store(store_path).close()
    a = spawn(DEPOSED, str(store_path))
    try:
        line = a.stdout.readline().split()
        assert line[:1] == ["leading"], a.stderr.read()
        term_a = int(line[1])
        os.kill(a.pid, signal.SIGSTOP)
        # B waits until A's lease runs out: A is stopped, so nothing renews it.
        with Store(store_path) as store, store.campaign(
            "scheduler", b"b", ttl=LONG_TTL, timeout=PATIENCE
        ) as b:
            assert b.term > term_a
            b.put("schedule", b"by b")
            os.kill(a.pid, signal.SIGCONT)
            out, err = a.communicate("go\n", timeout=PATIENCE)
            assert a.returncode == 0, err
            late = ["is_lost True", "put: LockLostError", "store.put: StaleTokenError"]
            assert out.splitlines() == late
            assert store.get("schedule") == Fenced(b"by b", b.term)
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
            a.wait()


def test_ctrl_c_ends_a_campaign(store_path):
    code = """
    import sys, fencelock
    with fencelock.Store(sys.argv[1]) as store:
        print("waiting", flush=True)
        try:
            store.campaign("scheduler", b"b")
        except KeyboardInterrupt:
            print("interrupted", store.waiters("scheduler"), flush=True)
    """
    with Store(store_path) as store, store.campaign("scheduler", b"a", ttl=LONG_TTL) as leadership:
        b = spawn(code, str(store_path))
        assert b.stdout.readline().strip() == "waiting"
        while not store.waiters("scheduler"):
            threading.Event().wait(0.005)
        os.kill(b.pid, signal.SIGINT)
        out, err = b.communicate(timeout=PATIENCE)
        assert b.returncode == 0, err
        assert out.strip() == "interrupted []"
        leader = store.leader("scheduler")
        assert leader is not None and leader.term == leadership.term


def test_leader_example_shows_a_deposed_leaders_write_refused():
    example = PACKAGE_SOURCE / "examples" / "leader.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A wakes and writes late: REFUSED" in done.stdout
