"""The enumerations of the C ABI's integer codes, as ``IntEnum``s that compare equal to the C
values. Those named in text (all but ``Mode``) print their name the way the library and
``fencelock status`` spell it."""

from __future__ import annotations

import enum

from . import _ffi

__all__ = ["Ending", "EventKind", "LockKind", "LockState", "Mode", "Scope"]


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
