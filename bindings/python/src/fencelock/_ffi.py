"""The one place that loads libfencelock and declares every C function of ``include/fencelock.h``.

Every ``argtypes``/``restype`` lives here; ``tests/test_header.py`` parses the header and fails when
a function is missing or a signature differs. Nothing else in the package touches ``ctypes.CDLL``.

Type mapping (kept in step with the test): ``int`` -> ``c_int``; ``const char *`` -> ``c_char_p``;
an input buffer ``const uint8_t *`` -> ``c_char_p`` (bytes are passed without a copy, NUL bytes
included, the length travels separately); an input array of names ``const char *const *`` ->
``POINTER(c_char_p)``; an output buffer ``uint8_t *`` -> ``POINTER(c_uint8)``; opaque handles ->
``POINTER(<opaque Structure>)``; a struct filled or passed by pointer -> ``POINTER(<its
Structure>)``; a returned buffer ``const uint8_t *`` (its length through an out-parameter) ->
``POINTER(c_uint8)``; ``void *`` -> ``c_void_p``; the callback type ``fencelock_observer_fn``
-> ``ObserverFn`` (a ``CFUNCTYPE``).

``ctypes.CDLL`` releases the GIL around every call, so a blocking call (a waiting acquire, a wait
for a lost lease, an open or a commit behind a busy store) lets other Python threads run. Every
blocking call is made through ``_handles.call_waiting``, which makes Ctrl-C end it.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any

LIBRARY_ENV = "FENCELOCK_LIBRARY"
LIBRARY_NAME = "libfencelock.so"

# Status codes; the same numbers as the header (checked by tests/test_header.py).
OK = 0
LOCKED = 1
STALE_TOKEN = 2
LOCK_LOST = 3
TIMEOUT = 4
INVALID_ARGUMENT = 5
NULL_POINTER = 6
IO = 7
CORRUPT = 8
NOT_A_STORE = 9
INCOMPATIBLE_VERSION = 10
IN_USE = 11
FORKED = 12
STORAGE = 13
NOT_FOUND = 14
PANIC = 15
CANCELLED = 16
REPLACED = 17
PERMITS_MISMATCH = 18
WOULD_DEADLOCK = 19

MODE_MULTI_PROCESS = 0
MODE_SINGLE_PROCESS = 1

OPEN_READ_ONLY = 1
OPEN_NO_HISTORY = 2
OPEN_WRITE_LOG = 8

ACQUIRE_WAIT = 1
ACQUIRE_PUT = 2

KIND_EXCLUSIVE = 0
KIND_SHARED = 1
KIND_SEMAPHORE = 2
MAX_HOLDERS = 1024

LOCK_HELD = 0
LOCK_EXPIRED = 1
LOCK_RELEASED = 2
LOCK_HOLDER_DEAD = 3

ENDING_HELD = 0
ENDING_RELEASED = 1
ENDING_EXPIRED = 2
ENDING_TAKEN_OVER = 3
ENDING_HOLDER_DIED = 4

SCOPE_STORE = 0
SCOPE_PROCESS = 1

EVENT_ACQUIRE = 0
EVENT_RELEASE = 1
EVENT_LOST = 2

fencelock_status = c_int32


class fencelock_store(Structure):
    """Opaque store handle."""


class fencelock_holder(Structure):
    """Opaque holder handle."""


class fencelock_cancel(Structure):
    """Opaque cancel handle."""


class fencelock_error(Structure):
    """Opaque error object."""


class fencelock_leadership(Structure):
    """Opaque leadership handle (a won campaign)."""


class fencelock_leader(Structure):
    """Opaque leader record."""


class fencelock_leader_watch(Structure):
    """Opaque watch of an election's leader."""


class fencelock_acquire_options(Structure):
    """How ``fencelock_store_acquire_opts`` acquires; ``size`` is the struct's own size."""

    _fields_ = [
        ("size", c_size_t),
        ("ttl_ms", c_uint64),
        ("timeout_ms", c_uint64),
        ("flags", c_uint64),
        ("kind", c_int32),
        ("permits", c_uint32),
        ("cancel", POINTER(fencelock_cancel)),
        ("key", c_char_p),
        ("key_len", c_size_t),
        ("value", c_char_p),
        ("value_len", c_size_t),
    ]


class fencelock_lock_list(Structure):
    """Opaque list of lock records."""


class fencelock_key_list(Structure):
    """Opaque list of keys."""


class fencelock_lock_info(Structure):
    """One lock record, as ``fencelock_lock_list_get`` fills it."""

    _fields_ = [
        ("name", c_char_p),
        ("token", c_uint64),
        ("pid", c_uint32),
        ("state", c_int32),
        ("granted_unix_ms", c_int64),
        ("expires_unix_ms", c_int64),
        ("remaining_ms", c_uint64),
    ]


class fencelock_waiter_list(Structure):
    """Opaque list of the waiters of a lock."""


class fencelock_waiter_info(Structure):
    """One waiter, as ``fencelock_waiter_list_get`` fills it."""

    _fields_ = [
        ("name", c_char_p),
        ("pid", c_uint32),
        ("ticket", c_uint64),
        ("waiting_since_unix_ms", c_int64),
        ("waited_ms", c_uint64),
    ]


class fencelock_history(Structure):
    """Opaque grant history of one lock."""


class fencelock_history_entry(Structure):
    """One grant of a lock's history, as ``fencelock_history_get`` fills it."""

    _fields_ = [
        ("token", c_uint64),
        ("kind", c_int32),
        ("permits", c_uint32),
        ("pid", c_uint32),
        ("ending", c_int32),
        ("granted_unix_ms", c_int64),
        ("expires_unix_ms", c_int64),
        ("ended_unix_ms", c_int64),
        ("recorded_unix_ms", c_int64),
    ]


class fencelock_metrics(Structure):
    """A snapshot of a store's counters, as ``fencelock_store_metrics`` fills it."""

    _fields_ = [
        ("scope", c_int32),
        ("since_unix_ms", c_int64),
        ("grants", c_uint64),
        ("releases", c_uint64),
        ("refused_locked", c_uint64),
        ("refused_timeout", c_uint64),
        ("refused_cancelled", c_uint64),
        ("refused_other", c_uint64),
        ("stale_writes", c_uint64),
        ("lock_lost", c_uint64),
        ("waits", c_uint64),
        ("wait_ns", c_uint64),
        ("wait_buckets", c_uint64 * 8),
        ("ended_released", c_uint64),
        ("ended_expired", c_uint64),
        ("ended_taken_over", c_uint64),
        ("ended_holder_died", c_uint64),
        ("commits", c_uint64),
        ("committed_ops", c_uint64),
        ("live_exclusive", c_uint64),
        ("live_shared", c_uint64),
        ("live_permits", c_uint64),
        ("queued_waiters", c_uint64),
        ("file_bytes", c_uint64),
        ("history_dropped", c_uint64),
    ]


class fencelock_event(Structure):
    """What an observer callback is told; ``name`` is valid during the call only."""

    _fields_ = [
        ("event", c_int32),
        ("name", c_char_p),
        ("kind", c_int32),
        ("permits", c_uint32),
        ("token", c_uint64),
        ("status", c_int32),
        ("waited_ns", c_uint64),
        ("held_ns", c_uint64),
    ]


# void (*fencelock_observer_fn)(void *context, const fencelock_event *event). ``ObserverFn()``
# is the NULL callback.
ObserverFn = ctypes.CFUNCTYPE(None, c_void_p, POINTER(fencelock_event))

StoreP = POINTER(fencelock_store)
HolderP = POINTER(fencelock_holder)
CancelP = POINTER(fencelock_cancel)
ErrorP = POINTER(fencelock_error)
LockListP = POINTER(fencelock_lock_list)
WaiterListP = POINTER(fencelock_waiter_list)
KeyListP = POINTER(fencelock_key_list)
BytesP = POINTER(c_uint8)
HistoryP = POINTER(fencelock_history)
LeadershipP = POINTER(fencelock_leadership)
LeaderP = POINTER(fencelock_leader)
LeaderWatchP = POINTER(fencelock_leader_watch)

# name -> (restype, argtypes). The order follows the header.
SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "fencelock_version": (c_char_p, []),
    "fencelock_version_number": (c_int, []),
    "fencelock_status_str": (c_char_p, [fencelock_status]),
    # cancel handle
    "fencelock_cancel_new": (fencelock_status, [POINTER(CancelP), POINTER(ErrorP)]),
    "fencelock_cancel_fire": (None, [CancelP]),
    "fencelock_cancel_set_timeout": (fencelock_status, [CancelP, c_uint64, POINTER(ErrorP)]),
    "fencelock_thread_self": (c_uint64, []),
    "fencelock_cancel_set_thread": (fencelock_status, [CancelP, c_uint64, POINTER(ErrorP)]),
    "fencelock_cancel_free": (None, [CancelP]),
    # leader election
    "fencelock_store_campaign": (
        fencelock_status,
        [
            StoreP,
            c_char_p,
            c_char_p,
            c_size_t,
            c_uint64,
            c_uint64,
            c_uint64,
            CancelP,
            POINTER(LeadershipP),
            POINTER(ErrorP),
        ],
    ),
    "fencelock_leadership_term": (c_uint64, [LeadershipP]),
    "fencelock_leadership_name": (c_char_p, [LeadershipP]),
    "fencelock_leadership_is_lost": (c_bool, [LeadershipP]),
    "fencelock_leadership_wait_lost": (
        fencelock_status,
        [LeadershipP, c_uint64, CancelP, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_leadership_proclaim": (fencelock_status, [LeadershipP, c_char_p, c_size_t, POINTER(ErrorP)]),
    "fencelock_leadership_put": (
        fencelock_status,
        [LeadershipP, c_char_p, c_size_t, c_char_p, c_size_t, POINTER(ErrorP)],
    ),
    "fencelock_leadership_delete": (
        fencelock_status,
        [LeadershipP, c_char_p, c_size_t, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_leadership_fence": (fencelock_status, [LeadershipP, c_char_p, POINTER(ErrorP)]),
    "fencelock_leadership_resign": (fencelock_status, [LeadershipP, POINTER(ErrorP)]),
    "fencelock_leadership_free": (None, [LeadershipP]),
    "fencelock_store_leader": (fencelock_status, [StoreP, c_char_p, POINTER(LeaderP), POINTER(ErrorP)]),
    "fencelock_leader_term": (c_uint64, [LeaderP]),
    "fencelock_leader_version": (c_uint64, [LeaderP]),
    "fencelock_leader_pid": (c_uint32, [LeaderP]),
    "fencelock_leader_since_unix_ms": (c_int64, [LeaderP]),
    "fencelock_leader_value": (BytesP, [LeaderP, POINTER(c_size_t)]),
    "fencelock_leader_name": (c_char_p, [LeaderP]),
    "fencelock_leader_free": (None, [LeaderP]),
    "fencelock_store_observe_leader": (
        fencelock_status,
        [StoreP, c_char_p, POINTER(LeaderWatchP), POINTER(ErrorP)],
    ),
    "fencelock_leader_watch_next": (
        fencelock_status,
        [LeaderWatchP, c_uint64, CancelP, POINTER(LeaderP), POINTER(ErrorP)],
    ),
    "fencelock_leader_watch_free": (None, [LeaderWatchP]),
    # error object
    "fencelock_error_status": (fencelock_status, [ErrorP]),
    "fencelock_error_message": (c_char_p, [ErrorP]),
    "fencelock_error_token": (c_uint64, [ErrorP]),
    "fencelock_error_highest": (c_uint64, [ErrorP]),
    "fencelock_error_pid": (c_uint32, [ErrorP]),
    "fencelock_error_remaining_ms": (c_uint64, [ErrorP]),
    "fencelock_error_os_code": (c_int, [ErrorP]),
    "fencelock_error_name": (c_char_p, [ErrorP]),
    "fencelock_error_path": (c_char_p, [ErrorP]),
    "fencelock_error_free": (None, [ErrorP]),
    # store
    "fencelock_store_open": (fencelock_status, [c_char_p, POINTER(StoreP), POINTER(ErrorP)]),
    "fencelock_store_open_with": (
        fencelock_status,
        [c_char_p, c_int32, c_uint64, POINTER(StoreP), POINTER(ErrorP)],
    ),
    "fencelock_store_open_cancellable": (
        fencelock_status,
        [c_char_p, c_int32, c_uint32, c_uint64, c_uint64, CancelP, POINTER(StoreP), POINTER(ErrorP)],
    ),
    "fencelock_store_close": (None, [StoreP]),
    "fencelock_store_acquire_opts": (
        fencelock_status,
        [
            StoreP,
            POINTER(c_char_p),
            c_size_t,
            POINTER(fencelock_acquire_options),
            POINTER(HolderP),
            POINTER(ErrorP),
        ],
    ),
    "fencelock_store_acquire": (
        fencelock_status,
        [StoreP, c_char_p, c_uint64, POINTER(HolderP), POINTER(ErrorP)],
    ),
    "fencelock_store_acquire_wait": (
        fencelock_status,
        [StoreP, c_char_p, c_uint64, c_uint64, POINTER(HolderP), POINTER(ErrorP)],
    ),
    "fencelock_store_acquire_wait_cancellable": (
        fencelock_status,
        [StoreP, c_char_p, c_uint64, c_uint64, CancelP, POINTER(HolderP), POINTER(ErrorP)],
    ),
    "fencelock_store_acquire_kind": (
        fencelock_status,
        [StoreP, c_char_p, c_int32, c_uint32, c_uint64, POINTER(HolderP), POINTER(ErrorP)],
    ),
    "fencelock_store_acquire_kind_cancellable": (
        fencelock_status,
        [StoreP, c_char_p, c_int32, c_uint32, c_uint64, CancelP, POINTER(HolderP), POINTER(ErrorP)],
    ),
    "fencelock_store_acquire_kind_wait": (
        fencelock_status,
        [
            StoreP,
            c_char_p,
            c_int32,
            c_uint32,
            c_uint64,
            c_uint64,
            CancelP,
            POINTER(HolderP),
            POINTER(ErrorP),
        ],
    ),
    "fencelock_store_acquire_all": (
        fencelock_status,
        [
            StoreP,
            POINTER(c_char_p),
            c_size_t,
            c_uint64,
            c_uint64,
            CancelP,
            POINTER(HolderP),
            POINTER(ErrorP),
        ],
    ),
    "fencelock_store_acquire_and_put": (
        fencelock_status,
        [
            StoreP,
            c_char_p,
            c_uint64,
            c_char_p,
            c_size_t,
            c_char_p,
            c_size_t,
            POINTER(HolderP),
            POINTER(ErrorP),
        ],
    ),
    "fencelock_store_acquire_and_put_cancellable": (
        fencelock_status,
        [
            StoreP,
            c_char_p,
            c_uint64,
            c_char_p,
            c_size_t,
            c_char_p,
            c_size_t,
            CancelP,
            POINTER(HolderP),
            POINTER(ErrorP),
        ],
    ),
    "fencelock_store_put": (
        fencelock_status,
        [StoreP, c_char_p, c_size_t, c_char_p, c_size_t, c_uint64, POINTER(ErrorP)],
    ),
    "fencelock_store_put_cancellable": (
        fencelock_status,
        [StoreP, c_char_p, c_size_t, c_char_p, c_size_t, c_uint64, CancelP, POINTER(ErrorP)],
    ),
    "fencelock_store_get": (
        fencelock_status,
        [
            StoreP,
            c_char_p,
            c_size_t,
            POINTER(BytesP),
            POINTER(c_size_t),
            POINTER(c_uint64),
            POINTER(ErrorP),
        ],
    ),
    "fencelock_store_delete": (
        fencelock_status,
        [StoreP, c_char_p, c_size_t, c_uint64, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_store_delete_cancellable": (
        fencelock_status,
        [StoreP, c_char_p, c_size_t, c_uint64, CancelP, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_store_fence": (fencelock_status, [StoreP, c_char_p, c_uint64, POINTER(ErrorP)]),
    "fencelock_store_fence_cancellable": (
        fencelock_status,
        [StoreP, c_char_p, c_uint64, CancelP, POINTER(ErrorP)],
    ),
    "fencelock_store_fence_token": (
        fencelock_status,
        [StoreP, c_char_p, POINTER(c_uint64), POINTER(ErrorP)],
    ),
    "fencelock_store_server_pid": (fencelock_status, [StoreP, POINTER(c_uint32), POINTER(ErrorP)]),
    "fencelock_store_locks": (fencelock_status, [StoreP, POINTER(LockListP), POINTER(ErrorP)]),
    "fencelock_store_keys": (
        fencelock_status,
        [StoreP, c_char_p, c_size_t, POINTER(KeyListP), POINTER(ErrorP)],
    ),
    "fencelock_store_metrics": (
        fencelock_status,
        [StoreP, POINTER(fencelock_metrics), c_size_t, POINTER(ErrorP)],
    ),
    "fencelock_store_metrics_prometheus": (
        fencelock_status,
        [StoreP, POINTER(BytesP), POINTER(c_size_t), POINTER(ErrorP)],
    ),
    "fencelock_store_set_observer": (fencelock_status, [StoreP, ObserverFn, c_void_p, POINTER(ErrorP)]),
    "fencelock_store_history": (fencelock_status, [StoreP, c_char_p, POINTER(HistoryP), POINTER(ErrorP)]),
    "fencelock_buffer_free": (None, [BytesP, c_size_t]),
    # history
    "fencelock_history_len": (c_size_t, [HistoryP]),
    "fencelock_history_get": (
        fencelock_status,
        [HistoryP, c_size_t, POINTER(fencelock_history_entry)],
    ),
    "fencelock_history_free": (None, [HistoryP]),
    # lock list
    "fencelock_lock_list_len": (c_size_t, [LockListP]),
    "fencelock_lock_list_get": (
        fencelock_status,
        [LockListP, c_size_t, POINTER(fencelock_lock_info)],
    ),
    "fencelock_lock_list_kind": (
        fencelock_status,
        [LockListP, c_size_t, POINTER(c_int32), POINTER(c_uint32)],
    ),
    "fencelock_lock_list_free": (None, [LockListP]),
    # waiter list
    "fencelock_store_waiters": (
        fencelock_status,
        [StoreP, c_char_p, POINTER(WaiterListP), POINTER(ErrorP)],
    ),
    "fencelock_waiter_list_len": (c_size_t, [WaiterListP]),
    "fencelock_waiter_list_get": (
        fencelock_status,
        [WaiterListP, c_size_t, POINTER(fencelock_waiter_info)],
    ),
    "fencelock_waiter_list_free": (None, [WaiterListP]),
    # key list
    "fencelock_key_list_len": (c_size_t, [KeyListP]),
    "fencelock_key_list_get": (
        fencelock_status,
        [KeyListP, c_size_t, POINTER(BytesP), POINTER(c_size_t)],
    ),
    "fencelock_key_list_free": (None, [KeyListP]),
    # holder
    "fencelock_holder_token": (c_uint64, [HolderP]),
    "fencelock_holder_name": (c_char_p, [HolderP]),
    "fencelock_holder_extend": (fencelock_status, [HolderP, c_uint64, POINTER(ErrorP)]),
    "fencelock_holder_extend_cancellable": (
        fencelock_status,
        [HolderP, c_uint64, CancelP, POINTER(ErrorP)],
    ),
    "fencelock_holder_is_held": (fencelock_status, [HolderP, POINTER(c_bool), POINTER(ErrorP)]),
    "fencelock_holder_remaining_ms": (fencelock_status, [HolderP, POINTER(c_uint64), POINTER(ErrorP)]),
    "fencelock_holder_put": (
        fencelock_status,
        [HolderP, c_char_p, c_size_t, c_char_p, c_size_t, POINTER(ErrorP)],
    ),
    "fencelock_holder_put_cancellable": (
        fencelock_status,
        [HolderP, c_char_p, c_size_t, c_char_p, c_size_t, CancelP, POINTER(ErrorP)],
    ),
    "fencelock_holder_delete": (
        fencelock_status,
        [HolderP, c_char_p, c_size_t, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_holder_delete_cancellable": (
        fencelock_status,
        [HolderP, c_char_p, c_size_t, CancelP, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_holder_release": (fencelock_status, [HolderP, POINTER(ErrorP)]),
    "fencelock_holder_keep_alive": (fencelock_status, [HolderP, c_uint64, POINTER(ErrorP)]),
    "fencelock_holder_wait_lost": (
        fencelock_status,
        [HolderP, c_uint64, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_holder_wait_lost_cancellable": (
        fencelock_status,
        [HolderP, c_uint64, CancelP, POINTER(c_bool), POINTER(ErrorP)],
    ),
    "fencelock_holder_kind": (c_int32, [HolderP]),
    "fencelock_holder_permits": (c_uint32, [HolderP]),
    "fencelock_holder_free": (None, [HolderP]),
}


def library_path() -> str:
    """The library to load: ``$FENCELOCK_LIBRARY`` if set, else the copy inside this package."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        return override
    return str(Path(__file__).with_name(LIBRARY_NAME))


def _load() -> ctypes.CDLL:
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        raise ImportError(
            f"fencelock: cannot load the native library {path!r} ({err}). "
            f"Reinstall the package with `pip install bindings/python` (it builds the library "
            f"with cargo), or point ${LIBRARY_ENV} at a libfencelock.so."
        ) from err
    for name, (restype, argtypes) in SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as err:
            raise ImportError(
                f"fencelock: {path!r} has no function {name}; it is not a matching build"
            ) from err
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _load()
loaded_path = library_path()
