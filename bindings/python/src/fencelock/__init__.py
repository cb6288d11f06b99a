"""fencelock: leased locks with fencing tokens, and fenced values, in one file shared by the
threads and processes of one host. Python binding over the C ABI of the Rust library.

    import fencelock

    with fencelock.Store("/tmp/locks.db") as store:
        with store.acquire("payment-export", ttl=30) as holder:
            holder.put("payments/today.csv", b"...")      # checked: lease current, token fresh
            store.put("payments/today.csv", b"...", holder.token)   # fenced by token alone

``store.lock(name, ttl=30, timeout=0, keep_alive=True)`` is a reusable lock object: ``with
lock:``, ``async with lock:`` and ``@lock`` on a function each acquire a new lease, renewed
while held, and release it on exit; ``lock.token`` is the current entry's token.

``store.acquire(name, shared=True)`` takes a shared (read) lock, ``store.acquire(name,
permits=4)`` one permit of a semaphore of 4, and ``store.acquire_all([a, b])`` several locks at
once, all or none.

A process that wakes after its lease expired and another process took over gets
``StaleTokenError`` (or ``LockLostError``) instead of overwriting the newer data.

The Holder is the lease: a bare ``store.acquire(...)`` whose result is dropped is released at
once (with a ``HolderDroppedWarning``). ``timeout=0`` (default) tries once, a positive timeout
waits up to that many seconds, ``timeout=None`` waits without a limit. ``acquire_async`` and
``wait_lost_async`` are the asyncio forms; cancelling the task cancels the wait.

Leader election: ``with store.campaign("scheduler", b"node-a") as leadership:`` waits to lead
(fairly, cancellably) and resigns on exit; ``leadership.term`` fences ``leadership.put``,
``delete`` and ``fence``, which the store refuses once the leadership ended (``is_lost``,
``wait_lost()``). ``store.leader(name)`` is the current leader, and ``for leader in
store.observe(name)`` (or ``async for``) every change, in order of terms.

``store.metrics()`` counts grants, refusals, waits and how leases ended (``metrics_prometheus()``
for a scrape), ``store.history(name)`` tells who held a lock and how each lease ended, and
``store.set_observer(fn)`` calls ``fn(event)`` as each acquire, release and loss ends.
"""

from ._election import Leadership, LeaderWatch
from ._enums import Ending, EventKind, LockKind, LockState, Mode, Scope
from ._errors import (
    CancelledError,
    CorruptError,
    FencelockError,
    ForkedError,
    IncompatibleVersionError,
    InUseError,
    InvalidArgumentError,
    IoError,
    LockedError,
    LockLostError,
    LockTimeoutError,
    NotAStoreError,
    NotFoundError,
    NullPointerError,
    PanicError,
    PermitsMismatchError,
    StaleTokenError,
    StorageError,
    StoreNotFoundError,
    StorePermissionError,
    StoreReplacedError,
    WouldDeadlockError,
)
from ._ffi import lib as _lib
from ._ffi import loaded_path as _loaded_path
from ._holder import Holder, HolderDroppedWarning
from ._lock import Lock
from ._store import Store
from ._types import Event, Fenced, HistoryEntry, Leader, LockInfo, Metrics, WaiterInfo

__version__ = "0.1.0"


def library_version() -> str:
    """The version of the loaded native library (``fencelock_version()``)."""
    version: bytes = _lib.fencelock_version()
    return version.decode("ascii")


def library_version_number() -> int:
    """The version of the loaded native library as one number, MAJOR * 1000000 + MINOR * 1000 +
    PATCH (``fencelock_version_number()``, the header's ``FENCELOCK_VERSION_NUMBER``): 1000 for
    0.1.0, so that ``library_version_number() >= 2000`` asks for 0.2.0 or later."""
    number: int = _lib.fencelock_version_number()
    return number


def library_path() -> str:
    """The path the native library was loaded from."""
    return _loaded_path


__all__ = [
    "CancelledError",
    "CorruptError",
    "Ending",
    "Event",
    "EventKind",
    "Fenced",
    "FencelockError",
    "ForkedError",
    "HistoryEntry",
    "Holder",
    "HolderDroppedWarning",
    "InUseError",
    "IncompatibleVersionError",
    "InvalidArgumentError",
    "IoError",
    "Leader",
    "LeaderWatch",
    "Leadership",
    "Lock",
    "LockInfo",
    "LockKind",
    "LockLostError",
    "LockState",
    "LockTimeoutError",
    "LockedError",
    "Metrics",
    "Mode",
    "NotAStoreError",
    "NotFoundError",
    "NullPointerError",
    "PanicError",
    "PermitsMismatchError",
    "Scope",
    "StaleTokenError",
    "StorageError",
    "Store",
    "StoreNotFoundError",
    "StorePermissionError",
    "StoreReplacedError",
    "WaiterInfo",
    "WouldDeadlockError",
    "__version__",
    "library_path",
    "library_version",
    "library_version_number",
]
