"""The values the binding returns (fenced values, lock records, metrics, history, observer
events) and the type aliases of its arguments: plain data, no C calls."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple, Union

from ._enums import Ending, EventKind, LockKind, LockState, Scope
from ._errors import FencelockError

__all__ = [
    "Event",
    "Fenced",
    "HistoryEntry",
    "Key",
    "Leader",
    "LockInfo",
    "Metrics",
    "PathLike",
    "Seconds",
    "Value",
    "WaiterInfo",
]

Seconds = Union[int, float, timedelta]
"""A duration: seconds as an int or float, or a ``datetime.timedelta``."""
Key = Union[bytes, bytearray, memoryview, str]
"""A fenced key: bytes (any bytes-like object) or str, encoded as UTF-8."""
Value = Union[bytes, bytearray, memoryview, str]
"""A fenced value: bytes (any bytes-like object) or str, encoded as UTF-8."""
PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


class Fenced(NamedTuple):
    """A fenced value and the token of the write that stored it."""

    value: bytes
    token: int


@dataclass(frozen=True)
class LockInfo:
    """What the store records of one lock. ``granted``/``expires`` are wall-clock estimates
    (UTC, timezone-aware); ``remaining`` is the lease time left in seconds, 0 once expired."""

    name: str
    token: int
    pid: int
    state: LockState
    granted: datetime
    expires: datetime
    remaining: float
    kind: LockKind = LockKind.EXCLUSIVE
    """A semaphore or shared lock lists one entry per grant it holds, under one name."""
    permits: int = 0
    """The name's permit count for a semaphore; 0 for another kind."""


@dataclass(frozen=True)
class Leader:
    """The leader of an election (``Store.leader``, ``Store.observe``): its ``term`` (the token
    of its grant, which fences its writes), the ``version`` of its value within the term (1 at
    the start, one more at each proclaim), its ``value``, its process id and when its term began
    (the leader's wall clock, UTC, timezone-aware)."""

    name: str
    term: int
    version: int
    value: bytes
    pid: int
    since: datetime


@dataclass(frozen=True)
class WaiterInfo:
    """An acquire queued waiting for a lock (``Store.waiters``): the waiting process, its place
    (a lower ``ticket`` waits longer and is served first), when it took it (a wall-clock
    estimate, UTC, timezone-aware) and how long it has waited, in seconds."""

    name: str
    pid: int
    ticket: int
    waiting_since: datetime
    waited: float


@dataclass(frozen=True)
class Metrics:
    """A snapshot of a store's counters (``Store.metrics()``), named as in the C ABI. Counters
    only grow; they start again from zero when the shared area is set up anew (after every
    process closed the store, or a reboot), as ``since`` tells. ``wait_time`` is in seconds;
    ``since`` is a wall-clock time (UTC, timezone-aware)."""

    scope: Scope
    """``Scope.STORE``: every process on this host counts into them; ``Scope.PROCESS``: this
    open store only."""
    since: datetime
    """When counting started."""
    grants: int
    """Leases granted (every name of an ``acquire_all`` counts)."""
    releases: int
    """Leases released by their holders."""
    refused_locked: int
    """Acquires refused because the lock was held."""
    refused_timeout: int
    """Waiting acquires whose timeout passed first."""
    refused_cancelled: int
    """Waiting acquires cancelled."""
    refused_other: int
    """Acquires refused for another reason."""
    stale_writes: int
    """Writes and fences refused for a stale token."""
    lock_lost: int
    """Holders' writes and extends refused because the lease was lost."""
    waits: int
    """Acquires that waited (granted, timed out or cancelled)."""
    wait_time: float
    """Their total wait, in seconds."""
    wait_buckets: tuple[int, ...]
    """The waits at or under 1 ms, 10 ms, 100 ms, 1 s, 10 s, 60 s, 600 s, and longer: eight
    counts, not cumulative."""
    ended_released: int
    """How the leases that later grants replaced had ended: released by the holder, expired,
    taken over while the holder held on past its TTL, or the holder died."""
    ended_expired: int
    ended_taken_over: int
    ended_holder_died: int
    commits: int
    """Write transactions committed."""
    committed_ops: int
    """The operations those commits carried."""
    live_exclusive: int
    """Gauges, read with the snapshot, of the whole store: the live leases (granted, not
    expired, holder alive) by kind: exclusive leases, shared holders, semaphore permits."""
    live_shared: int
    live_permits: int
    queued_waiters: int
    """Waiting acquires of live processes in the store's waiting queue (0 without a shared
    ring, as for ``Scope.PROCESS``)."""
    file_bytes: int
    """The store file's size in bytes."""
    history_dropped: int
    """Lease ends left out of the history: while it could not be written to the store file,
    the shared memory kept at most 2,048 pending ends and dropped later ones rather than
    refuse grants."""

    @property
    def leases_lost(self) -> int:
        """Leases that ended other than by a release: expired, taken over, or of a dead holder."""
        return self.ended_expired + self.ended_taken_over + self.ended_holder_died


@dataclass(frozen=True)
class HistoryEntry:
    """One grant of a lock, as ``Store.history()`` tells it. Times are wall-clock (UTC,
    timezone-aware), None where not known: ``ended`` for a held lease and where the store cannot
    know (a holder's death), ``recorded`` for a grant still in the lock's record."""

    name: str
    token: int
    kind: LockKind
    permits: int
    """The semaphore's permit count; 0 for another kind."""
    pid: int
    """The holder's process id."""
    ending: Ending
    granted: datetime | None
    expires: datetime | None
    """When the lease expires or expired, as last extended."""
    ended: datetime | None
    """When it ended: the release's time, the expiry, the grant that took it over."""
    recorded: datetime | None
    """When the store recorded the end."""


@dataclass(frozen=True)
class Event:
    """What an observer (``Store.set_observer``) is told. ``waited`` and ``held`` are seconds."""

    kind: EventKind
    name: str
    token: int
    """The lease's token; 0 for a refused acquire."""
    lock_kind: LockKind
    """How the lease holds (or the acquire asked to hold) the name."""
    permits: int
    """For a semaphore permit, the permit count; else 0."""
    error: FencelockError | None
    """For a refused acquire, the error its caller got (``LockedError``, ``LockTimeoutError``,
    ...; built from the status alone, without the refusal's numbers); else None."""
    waited: float
    """For an acquire: how long it waited (0 for a try-once acquire)."""
    held: float
    """For a release or a loss: how long after the grant."""
