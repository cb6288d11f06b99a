"""Store and Holder: the C ABI shaped into Python idioms. No locking logic lives here."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import functools
import math
import os
import sys
import threading
import warnings
import weakref
from ctypes import byref, c_bool, c_char_p, c_int32, c_size_t, c_uint32, c_uint64, string_at
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Generator, NamedTuple, Union

from . import _ffi
from ._errors import FencelockError, LockLostError, error_from
from ._ffi import BytesP, HistoryP, HolderP, KeyListP, LockListP, StoreP, lib
from ._handles import Cancel, Handle, _close_quietly, _Resource, call_waiting

__all__ = [
    "Ending",
    "Event",
    "EventKind",
    "Fenced",
    "HistoryEntry",
    "Holder",
    "HolderDroppedWarning",
    "LockInfo",
    "LockKind",
    "LockState",
    "Metrics",
    "Mode",
    "Scope",
    "Store",
]

Seconds = Union[int, float, timedelta]
"""A duration: seconds as an int or float, or a ``datetime.timedelta``."""
Key = Union[bytes, bytearray, memoryview, str]
"""A fenced key: bytes (any bytes-like object) or str, encoded as UTF-8."""
Value = Union[bytes, bytearray, memoryview, str]
"""A fenced value: bytes (any bytes-like object) or str, encoded as UTF-8."""
PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_U64_MAX = (1 << 64) - 1
# A timeout the library saturates: no limit.
_FOREVER_MS = _U64_MAX


class _NamedEnum(enum.IntEnum):
    """An ``IntEnum`` that prints as its name in lower case with dashes: ``held``,
    ``holder-dead``, ``taken-over``, also in f-strings (an ``IntEnum`` formats as its number
    before Python 3.12)."""

    def __str__(self) -> str:
        return self.name.lower().replace("_", "-")

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class Mode(enum.IntEnum):
    """How processes share the store file."""

    MULTI_PROCESS = _ffi.MODE_MULTI_PROCESS
    """Any number of processes open the file at once. The default."""
    SINGLE_PROCESS = _ffi.MODE_SINGLE_PROCESS
    """Only this process opens the file (another process's open raises InUseError); commits are
    cheaper."""


class LockState(_NamedEnum):
    """The state of a lock record, as ``Store.locks()`` reports it."""

    HELD = _ffi.LOCK_HELD
    EXPIRED = _ffi.LOCK_EXPIRED
    RELEASED = _ffi.LOCK_RELEASED
    HOLDER_DEAD = _ffi.LOCK_HOLDER_DEAD


class LockKind(_NamedEnum):
    """How a grant holds its name: ``Store.acquire(..., shared=True)`` gives ``SHARED``,
    ``Store.acquire(..., permits=n)`` a permit of a ``SEMAPHORE`` of ``n``."""

    EXCLUSIVE = _ffi.KIND_EXCLUSIVE
    """One holder at a time."""
    SHARED = _ffi.KIND_SHARED
    """Any number of shared holders at once, none while an exclusive holder holds the name."""
    SEMAPHORE = _ffi.KIND_SEMAPHORE
    """Up to the name's permit count of holders at once."""


class Ending(_NamedEnum):
    """How a grant of ``Store.history()`` ended, or that it has not."""

    HELD = _ffi.ENDING_HELD
    """Not yet: live and unexpired."""
    RELEASED = _ffi.ENDING_RELEASED
    """Its holder released it."""
    EXPIRED = _ffi.ENDING_EXPIRED
    """Its TTL ran out before its holder let go, and nobody took it over."""
    TAKEN_OVER = _ffi.ENDING_TAKEN_OVER
    """A later grant took the lock after the TTL ran out while the holder still held on (a
    paused holder: the case fencing tokens are for)."""
    HOLDER_DIED = _ffi.ENDING_HOLDER_DIED
    """Its holder's process ended without a release on record."""


class Scope(_NamedEnum):
    """Whose operations ``Store.metrics()`` counts."""

    STORE = _ffi.SCOPE_STORE
    """Every process on this host that opened the store since ``Metrics.since`` (the counters
    are in shared memory beside the store)."""
    PROCESS = _ffi.SCOPE_PROCESS
    """This open store only (single-process mode, or no shared area usable)."""


class EventKind(_NamedEnum):
    """What an ``Event`` of ``Store.set_observer`` tells of."""

    ACQUIRE = _ffi.EVENT_ACQUIRE
    """An acquire ended: granted, or refused (``Event.error``)."""
    RELEASE = _ffi.EVENT_RELEASE
    """A holder released its lease."""
    LOST = _ffi.EVENT_LOST
    """A holder learned its lease was lost."""


class HolderDroppedWarning(RuntimeWarning):
    """A ``Holder`` was garbage-collected unused while its lease was live, so its finalizer
    released the lease at once: nothing kept the holder, as after a bare ``store.acquire(...)``
    statement. Keep it as long as the lock is needed, best with ``with store.acquire(...) as
    holder:``. (A holder used and then dropped is released by the finalizer silently.)"""


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


class _Observer:
    """The observer slot of one store: the C callback (``thunk``) and the Python function it
    calls. The store's resource and the resource of every holder from the store keep it (see
    ``_Resource.keep``), so the C callback outlives every C object that may call it."""

    __slots__ = ("callback", "path", "thunk")

    def __init__(self, path: str) -> None:
        self.callback: Callable[[Event], Any] | None = None
        self.path = path
        self.thunk: Any = None

    def __call__(self, context: Any, event: Any) -> None:
        # Runs in the thread whose operation ended (ctypes takes the GIL). An exception is not
        # caught here: ctypes catches it and passes it to sys.unraisablehook.
        callback = self.callback
        if callback is not None:
            callback(_event(event.contents))

    def __repr__(self) -> str:
        return f"<fencelock observer {self.callback!r} of store {self.path!r}>"


def _event(ev: Any) -> Event:
    code = EventKind(ev.event)
    acquire = code is EventKind.ACQUIRE
    return Event(
        kind=code,
        name=ev.name.decode("utf-8"),
        token=ev.token,
        lock_kind=LockKind(ev.kind),
        permits=ev.permits,
        error=error_from(ev.status, None) if acquire and ev.status else None,
        waited=ev.waited_ns / 1e9,
        held=ev.held_ns / 1e9,
    )


# ---------------------------------------------------------------------------------------------
# Argument checks: a bad argument raises TypeError/ValueError here, before reaching C.


def _type_error(what: str, expected: str, value: Any) -> TypeError:
    return TypeError(f"{what} must be {expected}, not {type(value).__name__}")


def _name(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise _type_error(what, "str", value)
    if not value:
        raise ValueError(f"{what} is empty")
    if "\0" in value:
        raise ValueError(f"{what} contains a NUL character")
    return value.encode("utf-8")


def _bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise _type_error(what, "bytes or str", value)


def _key(value: Any, what: str = "key") -> bytes:
    key = _bytes(value, what)
    if not key:
        raise ValueError(f"{what} is empty")
    return key


def _token(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error("token", "int", value)
    if not 0 < value <= _U64_MAX:
        raise ValueError(f"token {value} is out of range: tokens are 1 to 2**64-1")
    return value


def _ms(value: Any, what: str, *, allow_zero: bool = False) -> int:
    """A duration in whole milliseconds; a positive duration never rounds down to zero."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise _type_error(what, "seconds (int or float) or a timedelta", value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{what} must be finite, not {seconds}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{what} must be {'zero or ' if allow_zero else ''}positive, not {seconds}")
    ms = round(seconds * 1000.0)
    if ms == 0 and seconds > 0:
        ms = 1
    if ms > _U64_MAX:
        raise ValueError(f"{what} of {seconds} s is too long")
    return ms


def _mode(value: Any) -> Mode:
    if isinstance(value, Mode):
        return value
    if isinstance(value, str):
        normalized = value.strip().lower().replace("-", "_")
        for mode in Mode:
            if mode.name.lower() == normalized:
                return mode
        raise ValueError(f"mode must be 'multi-process' or 'single-process', not {value!r}")
    raise _type_error("mode", "a fencelock.Mode or str", value)


def _kind(shared: Any, permits: Any) -> tuple[LockKind, int]:
    """The kind an acquire asks for: exclusive, shared, or a permit of a semaphore."""
    if not isinstance(shared, bool):
        raise _type_error("shared", "bool", shared)
    if permits is None:
        return (LockKind.SHARED if shared else LockKind.EXCLUSIVE), 0
    if shared:
        raise ValueError("an acquire is shared or a permit of a semaphore, not both")
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise _type_error("permits", "int or None", permits)
    if not 0 < permits <= _ffi.MAX_HOLDERS:
        raise ValueError(f"permits must be 1 to {_ffi.MAX_HOLDERS}, not {permits}")
    return LockKind.SEMAPHORE, permits


def _names(value: Any) -> list[bytes]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise _type_error("names", "a list of str", value)
    names = [_name(name, "lock name") for name in value]
    if not names or len(names) > _ffi.MAX_HOLDERS:
        raise ValueError(f"names must hold 1 to {_ffi.MAX_HOLDERS} lock names, not {len(names)}")
    if len(set(names)) != len(names):
        raise ValueError("a lock name is given twice")
    return names


def _datetime(unix_ms: int) -> datetime:
    return datetime.fromtimestamp(unix_ms / 1000.0, tz=timezone.utc)


def _datetime_or_none(unix_ms: int) -> datetime | None:
    return _datetime(unix_ms) if unix_ms else None


def _lock_state(value: int) -> LockState:
    return LockState(value)


def _wait_ms(timeout: Any) -> int:
    """A wait for a lock: 0 tries once, None waits without a limit (the library saturates the
    longest timeout), a positive duration waits up to that long."""
    if timeout is None:
        return _FOREVER_MS
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < 0:
        raise ValueError(
            f"timeout must be zero or positive, not {timeout}: timeout=None waits without a limit"
        )
    return _ms(timeout, "timeout", allow_zero=True)


# ---------------------------------------------------------------------------------------------


class Store(Handle):
    """A fencelock store: leased locks with fencing tokens and fenced values in one file.

    ``Store(path)`` opens the store at ``path``, creating it if needed; ``path`` may instead be
    an etcd store string, ``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]``, when the library is
    built with the etcd feature (``FENCELOCK_FEATURES=etcd``). ``mode`` is
    ``Mode.MULTI_PROCESS`` (default; also ``"multi-process"``) or ``Mode.SINGLE_PROCESS``;
    ``max_value_len`` limits fenced values in bytes (None: the library default of 16 MiB).
    ``busy_timeout`` bounds, in seconds, how long the open and each later write wait behind
    another process that holds the store (one paused inside a commit) before they raise
    ``LockTimeoutError`` (None: the library default of 10 s). Ctrl-C ends a waiting open.
    ``read_only=True`` opens an existing store for reading only: grants and writes raise
    ``InvalidArgumentError``, and the open never waits behind a process paused inside a
    commit, creates nothing and needs no write permission. ``history=False``: the grants this
    store commits record no grant history (``Store.history``), which makes a grant about a
    fifth cheaper in single-process mode; the metrics still count how leases ended.

    Use it as a context manager or call ``close()``. Holders acquired from a store stay usable
    after the store is closed. A store is safe to share between threads; it cannot be shared
    across ``os.fork()`` (the child gets ``ForkedError``: open a new Store in the child).
    """

    _kind = "store"

    def __init__(
        self,
        path: PathLike,
        *,
        mode: Mode | str = Mode.MULTI_PROCESS,
        max_value_len: int | None = None,
        busy_timeout: Seconds | None = None,
        read_only: bool = False,
        history: bool = True,
    ) -> None:
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise _type_error("path", "str, bytes or os.PathLike", path)
        raw_path = os.fsencode(path)
        if not raw_path:
            raise ValueError("path is empty")
        if b"\0" in raw_path:
            raise ValueError("path contains a NUL character")
        mode = _mode(mode)
        if max_value_len is None:
            limit = 0
        elif isinstance(max_value_len, bool) or not isinstance(max_value_len, int):
            raise _type_error("max_value_len", "int or None", max_value_len)
        elif not 0 < max_value_len <= _U64_MAX:
            raise ValueError(f"max_value_len must be positive, not {max_value_len}")
        else:
            limit = max_value_len
        busy_ms = 0 if busy_timeout is None else _ms(busy_timeout, "busy_timeout")
        if not isinstance(read_only, bool):
            raise _type_error("read_only", "bool", read_only)
        if not isinstance(history, bool):
            raise _type_error("history", "bool", history)
        flags = (_ffi.OPEN_READ_ONLY if read_only else 0) | (0 if history else _ffi.OPEN_NO_HISTORY)
        out = StoreP()
        status, err = call_waiting(
            lib.fencelock_store_open_cancellable,
            (raw_path, int(mode), flags, limit, busy_ms),
            (byref(out),),
            Cancel(),
            lambda: lib.fencelock_store_close(out),
        )
        if status:
            raise error_from(status, err, filename=os.fsdecode(raw_path))
        super().__init__(out, lib.fencelock_store_close)
        self._path = os.fsdecode(raw_path)
        self._mode = mode
        self._res.keep = _Observer(self._path)

    @property
    def path(self) -> str:
        """The store file's path."""
        return self._path

    @property
    def mode(self) -> Mode:
        """How the store shares its file between processes."""
        return self._mode

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<fencelock.Store {self._path!r}{state}>"

    # -- locks --------------------------------------------------------------------------------

    def acquire(
        self,
        name: str,
        ttl: Seconds = 30.0,
        *,
        timeout: Seconds | None = 0,
        shared: bool = False,
        permits: int | None = None,
    ) -> Holder:
        """Acquires the lock ``name`` for a lease of ``ttl`` seconds and returns its Holder, which
        *is* the lease: keep it (``with store.acquire(...) as holder:``). A Holder nothing refers
        to is collected and released at once, with a ``HolderDroppedWarning``.

        ``timeout`` follows the standard library's waits (``Event.wait``, ``Queue.get``):
        ``timeout=0`` (the default) tries once and raises ``LockedError`` (with the holder's
        token, pid and time left) when the lock is held; a positive ``timeout`` waits up to that
        many seconds and then raises ``LockTimeoutError`` (a ``TimeoutError``);
        ``timeout=None`` waits without a limit. The default does not wait, as the other
        languages' and the command line's do not: a holder that hangs would otherwise stall
        every caller silently. The wait releases the GIL; Ctrl-C (or another signal's
        exception) ends it at once, leaving the lock as it was, and so does closing the store
        from another thread (``ValueError``). For asyncio, see ``acquire_async``.

        ``shared=True`` acquires the lock shared: any number of shared holders at once, none
        while an exclusive holder holds it, and an exclusive acquire waits for every shared
        holder to go. A shared holder reads: its ``put``/``delete`` raise
        ``InvalidArgumentError`` (a shared lock promises its holders that nobody writes).
        ``permits=n`` acquires one permit of a semaphore of ``n`` (1 to 1024): up to ``n``
        holders at once; asking for another ``n`` while permits of the name are live raises
        ``PermitsMismatchError`` and changes nothing. Each grant of either kind has a token of
        its own, higher than every earlier grant, and its own lease and TTL. A grant that would
        join live holders stands behind every waiting acquire of the name, so a stream of shared
        acquires does not starve a waiting exclusive one.
        """
        raw_name, ttl_ms, timeout_ms = _name(name, "lock name"), _ms(ttl, "ttl"), _wait_ms(timeout)
        kind, count = _kind(shared, permits)
        out = HolderP()
        if kind is not LockKind.EXCLUSIVE:
            if timeout_ms == 0:
                self._res.check(
                    lib.fencelock_store_acquire_kind, raw_name, int(kind), count, ttl_ms, byref(out)
                )
            else:
                self._res.check_wait(
                    lib.fencelock_store_acquire_kind_wait,
                    (raw_name, int(kind), count, ttl_ms, timeout_ms),
                    (byref(out),),
                    lambda: lib.fencelock_holder_free(out),
                )
        elif timeout_ms == 0:
            self._res.check(lib.fencelock_store_acquire, raw_name, ttl_ms, byref(out))
        else:
            self._res.check_wait(
                lib.fencelock_store_acquire_wait_cancellable,
                (raw_name, ttl_ms, timeout_ms),
                (byref(out),),
                lambda: lib.fencelock_holder_free(out),
            )
        return Holder(out, ttl_ms, self._res.keep)

    def acquire_all(
        self, names: list[str], ttl: Seconds = 30.0, *, timeout: Seconds | None = 0
    ) -> list[Holder]:
        """Acquires every lock of ``names`` exclusively, all or none, in one transaction, and
        returns one Holder per name in the order given. Deadlock-free by construction: it never
        holds some while it waits for others. Each holder has its own token (they follow each
        other), lease and TTL, and is released, extended and lost on its own.

        ``timeout`` as for ``acquire``: 0 tries once (``LockedError`` naming the first held
        lock), a positive timeout waits until all are free at once, None without a limit.
        """
        raw = _names(names)
        ttl_ms, timeout_ms = _ms(ttl, "ttl"), _wait_ms(timeout)
        array = (c_char_p * len(raw))(*raw)
        outs = (HolderP * len(raw))()

        def undo() -> None:
            for out in outs:
                lib.fencelock_holder_free(out)

        if timeout_ms == 0:
            self._res.check(lib.fencelock_store_acquire_all, array, len(raw), ttl_ms, 0, None, outs)
        else:
            self._res.check_wait(
                lib.fencelock_store_acquire_all, (array, len(raw), ttl_ms, timeout_ms), (outs,), undo
            )
        return [Holder(out, ttl_ms, self._res.keep) for out in outs]

    def acquire_async(
        self,
        name: str,
        ttl: Seconds = 30.0,
        *,
        timeout: Seconds | None = 0,
        shared: bool = False,
        permits: int | None = None,
    ) -> _AsyncAcquire:
        """``acquire`` for asyncio, with the same ``timeout``, ``shared`` and ``permits``:
        ``holder = await store.acquire_async(...)``, or ``async with store.acquire_async(...) as
        holder:``, which releases on exit.

        The wait runs in a thread of its own while the task awaits it. Cancelling the task
        (``task.cancel()``, ``asyncio.wait_for``/``asyncio.timeout`` running out, Ctrl-C under
        ``asyncio.run``) cancels the wait in the library: once ``CancelledError`` reaches the
        caller the wait has ended, and a lock granted in the race is already released, so no
        thread is left behind to take the lock later. Arguments are checked at the call.
        """
        raw_name, ttl_ms, timeout_ms = _name(name, "lock name"), _ms(ttl, "ttl"), _wait_ms(timeout)
        kind, count = _kind(shared, permits)
        return _AsyncAcquire(self._acquire_async(raw_name, ttl_ms, timeout_ms, kind, count))

    async def _acquire_async(
        self, raw_name: bytes, ttl_ms: int, timeout_ms: int, kind: LockKind, count: int
    ) -> Holder:
        out = HolderP()
        exclusive = kind is LockKind.EXCLUSIVE
        if timeout_ms == 0:
            await self._res.check_wait_async(
                lib.fencelock_store_acquire if exclusive else lib.fencelock_store_acquire_kind,
                (raw_name, ttl_ms) if exclusive else (raw_name, int(kind), count, ttl_ms),
                (byref(out),),
                lambda: lib.fencelock_holder_free(out),
                cancellable=False,
            )
        else:
            await self._res.check_wait_async(
                lib.fencelock_store_acquire_wait_cancellable
                if exclusive
                else lib.fencelock_store_acquire_kind_wait,
                (raw_name, ttl_ms, timeout_ms)
                if exclusive
                else (raw_name, int(kind), count, ttl_ms, timeout_ms),
                (byref(out),),
                lambda: lib.fencelock_holder_free(out),
            )
        return Holder(out, ttl_ms, self._res.keep)

    def acquire_and_put(self, name: str, key: Key, value: Value, ttl: Seconds = 30.0) -> Holder:
        """Acquires the lock ``name`` and writes ``value`` under ``key`` with the new token, in one
        transaction: both happen or neither. Raises ``LockedError`` when the lock is held."""
        raw_name = _name(name, "lock name")
        raw_key = _key(key)
        raw_value = _bytes(value, "value")
        ttl_ms = _ms(ttl, "ttl")
        out = HolderP()
        self._res.check(
            lib.fencelock_store_acquire_and_put,
            raw_name,
            ttl_ms,
            raw_key,
            len(raw_key),
            raw_value,
            len(raw_value),
            byref(out),
        )
        return Holder(out, ttl_ms, self._res.keep)

    def locks(self) -> list[LockInfo]:
        """Every lock record with its state, in name order."""
        out = LockListP()
        self._res.check(lib.fencelock_store_locks, byref(out))
        try:
            result = []
            info = _ffi.fencelock_lock_info()
            kind, permits = c_int32(), c_uint32()
            for index in range(lib.fencelock_lock_list_len(out)):
                status = lib.fencelock_lock_list_get(out, index, byref(info)) or lib.fencelock_lock_list_kind(
                    out, index, byref(kind), byref(permits)
                )
                if status:
                    raise error_from(status, None)
                result.append(
                    LockInfo(
                        name=info.name.decode("utf-8"),
                        token=info.token,
                        pid=info.pid,
                        state=_lock_state(info.state),
                        granted=_datetime(info.granted_unix_ms),
                        expires=_datetime(info.expires_unix_ms),
                        remaining=info.remaining_ms / 1000.0,
                        kind=LockKind(kind.value),
                        permits=permits.value,
                    )
                )
            return result
        finally:
            lib.fencelock_lock_list_free(out)

    # -- fenced values ------------------------------------------------------------------------

    def put(self, key: Key, value: Value, token: int) -> None:
        """Stores ``value`` under ``key`` with ``token``. Raises ``StaleTokenError`` when the key
        accepted a higher token before (an equal token is accepted) and writes nothing then."""
        raw_key = _key(key)
        raw_value = _bytes(value, "value")
        self._res.check(
            lib.fencelock_store_put, raw_key, len(raw_key), raw_value, len(raw_value), _token(token)
        )

    def get(self, key: Key) -> Fenced | None:
        """The value under ``key`` and the token that wrote it, or None when it has no value."""
        raw_key = _key(key)
        ptr = BytesP()
        length = c_size_t()
        token = c_uint64()
        status, err = self._res.call(
            lib.fencelock_store_get, raw_key, len(raw_key), byref(ptr), byref(length), byref(token)
        )
        if status == _ffi.NOT_FOUND:
            if err:
                lib.fencelock_error_free(err)
            return None
        if status:
            raise error_from(status, err)
        try:
            value = string_at(ptr, length.value)
        finally:
            lib.fencelock_buffer_free(ptr, length.value)
        return Fenced(value, token.value)

    def delete(self, key: Key, token: int) -> bool:
        """Deletes ``key``, fenced like ``put``; returns whether it held a value. The key keeps
        the delete's token, so a stale write after the delete is still refused."""
        raw_key = _key(key)
        existed = c_bool()
        self._res.check(lib.fencelock_store_delete, raw_key, len(raw_key), _token(token), byref(existed))
        return existed.value

    def keys(self, prefix: Key = b"") -> list[bytes]:
        """The keys holding a value that start with ``prefix``, in byte order."""
        raw_prefix = _bytes(prefix, "prefix")
        out = KeyListP()
        self._res.check(
            lib.fencelock_store_keys, raw_prefix if raw_prefix else None, len(raw_prefix), byref(out)
        )
        try:
            keys = []
            ptr = BytesP()
            length = c_size_t()
            for index in range(lib.fencelock_key_list_len(out)):
                status = lib.fencelock_key_list_get(out, index, byref(ptr), byref(length))
                if status:
                    raise error_from(status, None)
                keys.append(string_at(ptr, length.value))
            return keys
        finally:
            lib.fencelock_key_list_free(out)

    def fence(self, resource: str, token: int) -> None:
        """Checks ``token`` against the external fence ``resource`` and records it as the highest
        seen. Raises ``StaleTokenError`` when a higher token passed before; an equal one passes.
        Use it to guard storage of your own with fencelock's tokens."""
        self._res.check(lib.fencelock_store_fence, _name(resource, "fence resource"), _token(token))

    @property
    def server_pid(self) -> int | None:
        """The process id of the server (``fencelock serve``) this store's operations go through
        now, or None when the store uses the file itself."""
        pid = c_uint32()
        self._res.check(lib.fencelock_store_server_pid, byref(pid))
        return pid.value or None

    def fence_token(self, resource: str) -> int | None:
        """The highest token the external fence ``resource`` has accepted, or None."""
        token = c_uint64()
        self._res.check(lib.fencelock_store_fence_token, _name(resource, "fence resource"), byref(token))
        return token.value or None

    # -- observability ------------------------------------------------------------------------

    def metrics(self) -> Metrics:
        """A snapshot of the store's counters: of every process on this host that has the store
        open (and of those that had, since ``Metrics.since``), or of this open store alone, as
        ``Metrics.scope`` says. An etcd store keeps none (``InvalidArgumentError``)."""
        out = _ffi.fencelock_metrics()
        self._res.check(lib.fencelock_store_metrics, byref(out), ctypes.sizeof(out))
        return Metrics(
            scope=Scope(out.scope),
            since=_datetime(out.since_unix_ms),
            grants=out.grants,
            releases=out.releases,
            refused_locked=out.refused_locked,
            refused_timeout=out.refused_timeout,
            refused_cancelled=out.refused_cancelled,
            refused_other=out.refused_other,
            stale_writes=out.stale_writes,
            lock_lost=out.lock_lost,
            waits=out.waits,
            wait_time=out.wait_ns / 1e9,
            wait_buckets=tuple(out.wait_buckets),
            ended_released=out.ended_released,
            ended_expired=out.ended_expired,
            ended_taken_over=out.ended_taken_over,
            ended_holder_died=out.ended_holder_died,
            commits=out.commits,
            committed_ops=out.committed_ops,
        )

    def metrics_prometheus(self) -> str:
        """The store's counters in Prometheus' text exposition format, every series named
        ``fencelock_...`` and labelled with the store's path. An etcd store keeps none
        (``InvalidArgumentError``)."""
        ptr = BytesP()
        length = c_size_t()
        self._res.check(lib.fencelock_store_metrics_prometheus, byref(ptr), byref(length))
        try:
            return string_at(ptr, length.value).decode("utf-8")
        finally:
            lib.fencelock_buffer_free(ptr, length.value)

    def history(self, name: str) -> list[HistoryEntry]:
        """The grant history of the lock ``name``, oldest first: its latest ended grants (up to
        32), then its current grants with their state now; empty for a lock the store knows
        nothing of. A grant that replaced a lease recorded how that lease ended
        (``Ending.TAKEN_OVER`` for a holder paused past its TTL); a process records its own
        releases as it closes the store. The library checks the name: an empty one raises
        ``InvalidArgumentError``, as does an etcd store."""
        if not isinstance(name, str):
            raise _type_error("lock name", "str", name)
        if "\0" in name:
            raise ValueError("lock name contains a NUL character")
        out = HistoryP()
        self._res.check(lib.fencelock_store_history, name.encode("utf-8"), byref(out))
        try:
            result = []
            entry = _ffi.fencelock_history_entry()
            for index in range(lib.fencelock_history_len(out)):
                status = lib.fencelock_history_get(out, index, byref(entry))
                if status:
                    raise error_from(status, None)
                result.append(
                    HistoryEntry(
                        name=name,
                        token=entry.token,
                        kind=LockKind(entry.kind),
                        permits=entry.permits,
                        pid=entry.pid,
                        ending=Ending(entry.ending),
                        granted=_datetime_or_none(entry.granted_unix_ms),
                        expires=_datetime_or_none(entry.expires_unix_ms),
                        ended=_datetime_or_none(entry.ended_unix_ms),
                        recorded=_datetime_or_none(entry.recorded_unix_ms),
                    )
                )
            return result
        finally:
            lib.fencelock_history_free(out)

    def set_observer(self, observer: Callable[[Event], Any] | None) -> None:
        """Calls ``observer(event)`` with an ``Event`` after each acquire of this process's
        store ends (granted or refused), after each release, and when a holder learns its lease
        was lost; replaces any observer set before, and None removes it. It hears the store's
        holders too, also after the store is closed.

        It runs on the thread whose operation ended, which may be a thread of the library (a
        keep-alive thread for a loss), while that operation's caller waits: it must be
        thread-safe and return quickly, and must neither close the store nor set its observer
        (``set_observer`` returns once no call of the observer it replaces is running, so a
        call from inside one would wait for itself). An exception it raises
        does not reach the operation, which goes on as if nothing happened: it is reported
        through ``sys.unraisablehook`` (by ctypes, as "Exception ignored on calling ctypes
        callback function"). An etcd store takes no observer (``InvalidArgumentError``)."""
        if observer is not None and not callable(observer):
            raise _type_error("observer", "callable or None", observer)
        slot: _Observer = self._res.keep
        if observer is None:
            self._res.check(lib.fencelock_store_set_observer, _ffi.ObserverFn(), None)
        else:
            if slot.thunk is None:
                # One C callback per store, freed only after the store and all its holders: it
                # calls whatever function the slot holds at the time.
                slot.thunk = _ffi.ObserverFn(slot)
            self._res.check(lib.fencelock_store_set_observer, slot.thunk, None)
        slot.callback = observer


class _AsyncAcquire:
    """What ``Store.acquire_async`` returns: awaitable (the Holder) and an async context manager
    (the Holder, released on exit)."""

    __slots__ = ("_coro", "_holder")

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self._holder: Holder | None = None

    def __await__(self) -> Generator[Any, None, Holder]:
        return self._coro.__await__()  # type: ignore[no-any-return]

    async def __aenter__(self) -> Holder:
        self._holder = await self._coro
        return self._holder

    async def __aexit__(self, *exc: object) -> None:
        assert self._holder is not None
        await self._holder.__aexit__(*exc)


def _release_then_close(resource: _Resource, name: str, token: int, used: list[bool]) -> None:
    """The holder finalizer: release the lease, then free the handle. Never raises. Warns when
    it ends a live lease of a holder never used after its acquire, while the program runs (not
    at exit): the pitfall of a bare ``store.acquire(...)`` statement."""
    dropped = False
    with contextlib.suppress(Exception):
        if not resource.inherited and not resource.closed:
            lost = c_bool()
            status, err = resource.call(lib.fencelock_holder_wait_lost, 0, byref(lost))
            if status and err:
                lib.fencelock_error_free(err)
            dropped = status == _ffi.OK and not lost.value
            # Released before the free so that a watcher thread blocked in wait_lost (which
            # delays the free) wakes at once and the lease does not outlive the object.
            status, err = resource.call(lib.fencelock_holder_release)
            if status and err:
                lib.fencelock_error_free(err)
    _close_quietly(resource)
    exiting = sys.is_finalizing() or not threading.main_thread().is_alive()
    if dropped and not used[0] and not exiting:
        with contextlib.suppress(Exception):
            warnings.warn(
                f"the fencelock Holder of lock {name!r} (token {token}) was collected without "
                "ever being used, so its finalizer released the lease (a bare store.acquire(...) "
                "releases at once): keep the Holder while the lock is needed, as in "
                "`with store.acquire(...) as holder:`",
                HolderDroppedWarning,
                stacklevel=3,
            )


class Holder(Handle):
    """A granted lease, returned by ``Store.acquire``; not created directly.

    ``token`` is higher than that of every earlier grant of the store. As a context manager
    (``with``, or ``async with`` for ``Store.acquire_async``) it releases the lease on exit, and
    raises ``LockLostError`` there when the lease was lost inside the block; ``close()``
    releases it too, and so does the finalizer when the object is collected (with a
    ``HolderDroppedWarning`` for a holder never used). A holder may be used from many threads
    at once.
    """

    _kind = "holder"

    def __init__(self, ptr: Any, ttl_ms: int, keep: Any = None) -> None:
        # Read before the base class makes the finalizer, which names them in its warning.
        self._token: int = lib.fencelock_holder_token(ptr)
        raw_name: bytes = lib.fencelock_holder_name(ptr)
        self._name = raw_name.decode("utf-8")
        self._lock_kind = LockKind(lib.fencelock_holder_kind(ptr))
        self._permits: int = lib.fencelock_holder_permits(ptr)
        self._ttl_ms = ttl_ms
        self._released = False
        self._used = [False]
        super().__init__(ptr, lib.fencelock_holder_free)
        self._res.keep = keep  # the store's observer, which this holder's release may call
        self._used[0] = False  # the construction above does not count as a use

    def __getattribute__(self, name: str) -> Any:
        # Any use after acquire returned (a `with`, `.token`, a call) shows the holder was kept:
        # only one collected unused, the result of a bare `store.acquire(...)`, is warned of.
        object.__getattribute__(self, "_used")[0] = True
        return object.__getattribute__(self, name)

    def _finalize_fn(self) -> Callable[[_Resource], None]:  # type: ignore[override]
        # A partial, not a bound method: the finalizer must not keep the holder alive.
        return functools.partial(_release_then_close, name=self._name, token=self._token, used=self._used)

    def __exit__(self, *exc: object) -> bool | None:
        """Releases the lease. Raises ``LockLostError`` when the lease was lost inside the
        block (it expired, or another holder took the lock over), as redis-py's
        ``LockNotOwnedError`` does: what the block did under the lock was not protected to the
        end. When the block raised, its exception propagates instead, with a note."""
        try:
            lost = self._lost_in_block()
        finally:
            self.close()
        if lost is not None:
            if exc[1] is None:
                raise lost
            if hasattr(exc[1], "add_note"):  # Python 3.11+
                exc[1].add_note(str(lost))
        return None

    async def __aenter__(self) -> Holder:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> bool | None:
        """As ``__exit__``; the release runs in a thread, as it may wait behind a busy store."""
        loop = asyncio.get_running_loop()
        return await asyncio.shield(loop.run_in_executor(None, lambda: self.__exit__(*exc)))

    def _lost_in_block(self) -> LockLostError | None:
        """The error for a lease the library no longer counts as held, unless this holder let
        go itself (released, closed, or the parent's in a forked child)."""
        if self.closed or self._released or self._res.inherited or self.held():
            return None
        err = LockLostError(
            _ffi.LOCK_LOST,
            f"lost the lease of lock {self._name!r} (token {self._token}) before the with block "
            "ended: it expired or was taken over, so its writes were not protected to the end",
        )
        err.token = self._token
        return err

    @property
    def token(self) -> int:
        """The fencing token of this lease."""
        return self._token

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def kind(self) -> LockKind:
        """How the lease holds the name: exclusive, shared, or a permit of a semaphore."""
        return self._lock_kind

    @property
    def permits(self) -> int:
        """The permit count of the semaphore this is a permit of; 0 for another kind."""
        return self._permits

    def __repr__(self) -> str:
        state = " closed" if self.closed else (" released" if self._released else "")
        return f"<fencelock.Holder {self._name!r} token={self._token}{state}>"

    def close(self) -> None:
        """Releases the lease (see ``release``) and frees the handle. Idempotent."""
        try:
            if not self.closed and not self._res.inherited:
                self.release()
        finally:
            super().close()

    def release(self) -> None:
        """Releases the lease; other processes see it free at once. Idempotent, and a stale
        holder's release never touches its successor's lease. Token and name stay readable."""
        if self.closed:
            return
        self._released = True
        self._res.check(lib.fencelock_holder_release)

    def extend(self, ttl: Seconds) -> None:
        """Renews the lease for ``ttl`` seconds from now. Raises ``LockLostError`` when the lease
        expired (taken over or not), or was released."""
        ttl_ms = _ms(ttl, "ttl")
        self._res.check(lib.fencelock_holder_extend, ttl_ms)
        self._ttl_ms = ttl_ms

    def held(self) -> bool:
        """Whether this holder still holds the lease: not released, not expired, not taken over.
        Reads the store; writes nothing."""
        held = c_bool()
        self._res.check(lib.fencelock_holder_is_held, byref(held))
        return held.value

    def put(self, key: Key, value: Value) -> None:
        """Writes ``value`` under ``key`` with this holder's token, checking in the same
        transaction that the lease is still current (``LockLostError`` otherwise) and that the
        key accepted no higher token (``StaleTokenError``). A permit of a semaphore writes
        checked against its own permit; a shared holder raises ``InvalidArgumentError``."""
        raw_key = _key(key)
        raw_value = _bytes(value, "value")
        self._res.check(lib.fencelock_holder_put, raw_key, len(raw_key), raw_value, len(raw_value))

    def delete(self, key: Key) -> bool:
        """Deletes ``key`` with this holder's token, checked like ``put``. Returns whether the
        key held a value."""
        raw_key = _key(key)
        existed = c_bool()
        self._res.check(lib.fencelock_holder_delete, raw_key, len(raw_key), byref(existed))
        return existed.value

    # -- keep-alive and loss ------------------------------------------------------------------

    def keep_alive(
        self,
        ttl: Seconds | None = None,
        *,
        on_lost: Callable[[Holder], Any] | None = None,
    ) -> None:
        """Keeps the lease alive from a background thread of the library: renews it for ``ttl``
        (default: the ttl it was acquired or last extended with) every third of ``ttl`` until it is
        released or lost. ``ttl`` must be at least 3 ms. Calling it again changes nothing.

        ``on_lost``, if given, is registered as with ``on_lost()``. Learn of a loss with
        ``lost``, ``wait_lost()`` or ``on_lost()``.
        """
        ttl_ms = self._ttl_ms if ttl is None else _ms(ttl, "ttl")
        self._res.check(lib.fencelock_holder_keep_alive, ttl_ms)
        if on_lost is not None:
            self.on_lost(on_lost)

    @property
    def lost(self) -> bool:
        """Whether the lease is known to be lost or released: its TTL ran out without a
        renewal, an ``extend``/``put``/``delete`` found it taken over, or it was released.
        Reads no storage; whether another holder took the lock is answered by ``held()``."""
        lost = c_bool()
        self._res.check(lib.fencelock_holder_wait_lost, 0, byref(lost))
        return lost.value

    def wait_lost(self, timeout: Seconds | None = None) -> bool:
        """Blocks until the lease is known to be lost or released (see ``lost``), or ``timeout``
        seconds pass (None: no limit). Returns whether it ended. Releases the GIL while waiting;
        Ctrl-C (or another signal's exception) ends the wait at once, and so does closing the
        holder from another thread (``ValueError``)."""
        timeout_ms = _FOREVER_MS if timeout is None else _ms(timeout, "timeout", allow_zero=True)
        lost = c_bool()
        self._res.check_wait(lib.fencelock_holder_wait_lost_cancellable, (timeout_ms,), (byref(lost),))
        return lost.value

    async def wait_lost_async(self, timeout: Seconds | None = None) -> bool:
        """``wait_lost`` for asyncio: the wait runs in a thread of its own, and cancelling the
        awaiting task ends it in the library (within about 10 ms) before ``CancelledError``
        propagates."""
        timeout_ms = _FOREVER_MS if timeout is None else _ms(timeout, "timeout", allow_zero=True)
        lost = c_bool()
        await self._res.check_wait_async(
            lib.fencelock_holder_wait_lost_cancellable, (timeout_ms,), (byref(lost),)
        )
        return lost.value

    def on_lost(self, callback: Callable[[Holder], Any]) -> threading.Thread:
        """Runs ``callback(holder)`` from a watcher thread as soon as the lease is known to be
        lost (see ``lost``; pair it with ``keep_alive``). It is not run when this holder released
        the lease itself, was closed, or was collected. Returns the (daemon) watcher thread.
        An exception in the callback goes to ``threading.excepthook``."""
        if not callable(callback):
            raise _type_error("callback", "callable", callback)
        if self.closed:
            raise ValueError("operation on a closed fencelock holder")
        watcher = threading.Thread(
            target=_watch,
            args=(self._res, weakref.ref(self), callback),
            name=f"fencelock-watch-{self._token}",
            daemon=True,
        )
        watcher.start()
        return watcher


def _watch(resource: _Resource, holder_ref: weakref.ref[Holder], callback: Callable[[Holder], Any]) -> None:
    # Holds the resource, not the Holder, so a holder dropped by its owner is still collected
    # (its finalizer releases the lease, which wakes this thread, which then exits).
    # One wait, ended by the library when the lease ends (close() and the finalizer release it
    # first). No cancel handle: the library looks at one every millisecond, a cost for a wait
    # as long as the lease, while a wait without one sleeps until the lease ends.
    lost = c_bool()
    try:
        status, err = resource.call(lib.fencelock_holder_wait_lost, _FOREVER_MS, byref(lost))
    except ValueError:  # the holder was closed
        return
    if status:
        if err:
            lib.fencelock_error_free(err)
        return
    holder = holder_ref()
    if not lost.value:
        return
    if holder is None or holder._released or holder.closed:
        return
    callback(holder)
