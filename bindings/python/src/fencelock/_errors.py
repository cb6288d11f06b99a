"""Exceptions, one per status code of the C ABI, mapped in one table (``_BY_STATUS``)."""

from __future__ import annotations

import errno as _errno
import os
from typing import Any

from . import _ffi
from ._ffi import lib


class FencelockError(Exception):
    """Base of every error the library reports. ``status`` is the C status code."""

    status: int = -1

    def __init__(self, status: int, message: str) -> None:
        # One positional argument only: some subclasses also derive from OSError, whose
        # constructor would read two arguments as (errno, strerror).
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps errors picklable (multiprocessing, concurrent.futures) with their details.
        return (_rebuild, (type(self), self.status, self.message, dict(self.__dict__)))


def _rebuild(cls: type[FencelockError], status: int, message: str, state: dict[str, Any]) -> FencelockError:
    err = cls(status, message)
    for name in ("errno", "strerror", "filename"):  # OSError's attributes are not in __dict__
        if name in state:
            setattr(err, name, state.pop(name))
    err.__dict__.update(state)
    return err


class LockedError(FencelockError):
    """The lock ``name`` is held by a live lease. ``token``/``pid`` name the holder;
    ``remaining`` is the time left on its lease, in seconds."""

    name: str = ""
    token: int = 0
    pid: int = 0
    remaining: float = 0.0


class StaleTokenError(FencelockError):
    """A fenced write carried ``token``, lower than the ``highest`` the key or resource
    accepted. Nothing was written."""

    token: int = 0
    highest: int = 0


class LockLostError(FencelockError):
    """The holder's lease with ``token`` expired, was taken over or was released. ``current`` is
    the token now recorded for the lock, or None."""

    token: int = 0
    current: int | None = None


class LockTimeoutError(FencelockError, TimeoutError):
    """A wait gave up after its timeout: a waiting acquire, or an open or a write that waited
    past the store's busy timeout behind another process (one paused inside a commit). Also a
    builtin ``TimeoutError``. For a waiting acquire, as filelock's ``Timeout`` names its lock
    file, ``name`` is the lock and ``timeout`` the seconds waited, and the message says both;
    otherwise they are None."""

    name: str | None = None
    timeout: float | None = None

    def waited_for(self, name: str, timeout: float) -> None:
        """Names the lock and the wait of the acquire that gave up (the caller's arguments)."""
        self.name = name
        self.timeout = timeout
        self.message = f"timed out after {timeout:g} s waiting for lock {name!r}"
        self.args = (self.message,)


class InvalidArgumentError(FencelockError, ValueError):
    """The library refused an argument as out of range or malformed. Also a ``ValueError``."""


class NullPointerError(FencelockError):
    """The C library received a NULL pointer (a bug in the binding if it ever happens)."""


class IoError(FencelockError, OSError):
    """An operating-system I/O error. Also an ``OSError``, with ``errno`` and ``strerror`` set
    when the library reports the system's error number (``fencelock_error_os_code``), and
    ``filename`` set to the store's path when the error came from opening it. The common errors
    are also the builtin subclasses: ``StoreNotFoundError`` is a ``FileNotFoundError`` (the
    store's directory is missing), ``StorePermissionError`` a ``PermissionError``. With an
    errno its text is OSError's, ``[Errno 2] No such file or directory: 'path'``; ``message``
    keeps the library's."""

    def __str__(self) -> str:
        if self.errno is not None:
            return OSError.__str__(self)
        # As OSError prints its filename, unless the library's message already names it.
        if self.filename is not None and str(self.filename) not in self.message:
            return f"{self.message}: {self.filename!r}"
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        state = dict(self.__dict__, errno=self.errno, strerror=self.strerror, filename=self.filename)
        return (_rebuild, (type(self), self.status, self.message, state))


class StoreNotFoundError(IoError, FileNotFoundError):
    """``ENOENT``: a directory on the store's path is missing. Also a ``FileNotFoundError``."""


class StorePermissionError(IoError, PermissionError):
    """``EACCES``/``EPERM``: the store's file or directory may not be opened or created. Also a
    ``PermissionError``."""


class CorruptError(FencelockError):
    """The store file is damaged."""


class NotAStoreError(FencelockError):
    """The file exists but is not a fencelock store; it was left untouched."""


class IncompatibleVersionError(FencelockError):
    """The store was written by a newer fencelock."""


class InUseError(FencelockError):
    """The store is open elsewhere in single-process mode, or in another mode."""


class ForkedError(FencelockError):
    """A store (or a holder of it) opened before ``os.fork()`` was used in the child process.
    Open a new ``Store`` in the child."""


class StorageError(FencelockError):
    """Any other error of the storage engine."""


class NotFoundError(FencelockError, LookupError):
    """The key has no value (``Store.get`` returns None instead of raising it)."""


class PanicError(FencelockError):
    """A panic was caught at the C boundary; the handle involved may be unusable."""


class CancelledError(FencelockError):
    """A wait was ended through its cancel handle; nothing changed. The binding cancels a wait
    only to deliver a signal (the signal's exception, such as ``KeyboardInterrupt``, is raised
    instead) or when the handle is closed (``ValueError``), so this is seldom seen."""


class PermitsMismatchError(FencelockError):
    """A semaphore acquire asked for ``requested`` permits while live permits of the name were
    granted with ``permits``; nothing changed. Once no permit is live, a new count is taken."""

    permits: int = 0
    requested: int = 0


class WouldDeadlockError(FencelockError, RuntimeError):
    """A waiting acquire would wait for a live lease that this same thread holds through this
    same ``Store`` (``token`` is that lease's, ``name`` its lock's): nothing but that lease's end could end the wait,
    so it is refused at once, as filelock refuses a same-thread deadlock. Nothing changed.
    Another thread, another ``Store`` of the file or another process waits as ever."""

    name: str = ""
    token: int = 0


class StoreReplacedError(FencelockError):
    """The store file was deleted, renamed or replaced at its path since this ``Store`` opened
    it; writes and grants through it are refused. Open a new ``Store``."""


_BY_STATUS: dict[int, type[FencelockError]] = {
    _ffi.LOCKED: LockedError,
    _ffi.STALE_TOKEN: StaleTokenError,
    _ffi.LOCK_LOST: LockLostError,
    _ffi.TIMEOUT: LockTimeoutError,
    _ffi.INVALID_ARGUMENT: InvalidArgumentError,
    _ffi.NULL_POINTER: NullPointerError,
    _ffi.IO: IoError,
    _ffi.CORRUPT: CorruptError,
    _ffi.NOT_A_STORE: NotAStoreError,
    _ffi.INCOMPATIBLE_VERSION: IncompatibleVersionError,
    _ffi.IN_USE: InUseError,
    _ffi.FORKED: ForkedError,
    _ffi.STORAGE: StorageError,
    _ffi.NOT_FOUND: NotFoundError,
    _ffi.PANIC: PanicError,
    _ffi.CANCELLED: CancelledError,
    _ffi.REPLACED: StoreReplacedError,
    _ffi.PERMITS_MISMATCH: PermitsMismatchError,
    _ffi.WOULD_DEADLOCK: WouldDeadlockError,
}

_FORK_HINT = (
    " (fencelock: a Store cannot be shared across os.fork(); open a new fencelock.Store in the child process)"
)


def status_str(status: int) -> str:
    """The C library's static description of a status code."""
    text: bytes = lib.fencelock_status_str(status)
    return text.decode("utf-8", "replace")


# The builtin OSError subclass of an errno, as OSError(errno, ...) itself would pick.
_BY_ERRNO: dict[int, type[IoError]] = {
    _errno.ENOENT: StoreNotFoundError,
    _errno.EACCES: StorePermissionError,
    _errno.EPERM: StorePermissionError,
}


def _text(name: bytes) -> str:
    return name.decode("utf-8", "replace")


def error_from(status: int, err: Any, filename: str | None = None) -> FencelockError:
    """Builds the exception for ``status`` from the C error object ``err`` (may be NULL) and
    frees ``err``. ``filename`` is the path an I/O error concerns (an open's), if known; the
    library's own (``fencelock_error_path``) comes first."""
    cls = _BY_STATUS.get(status, FencelockError)
    details: dict[str, Any] = {}
    name = b""
    if err:
        try:
            message = lib.fencelock_error_message(err).decode("utf-8", "replace")
            token = lib.fencelock_error_token(err)
            highest = lib.fencelock_error_highest(err)
            pid = lib.fencelock_error_pid(err)
            remaining_ms = lib.fencelock_error_remaining_ms(err)
            os_code = lib.fencelock_error_os_code(err)
            name = lib.fencelock_error_name(err) or b""
            path = lib.fencelock_error_path(err)
            if path:
                filename = os.fsdecode(path)
        finally:
            lib.fencelock_error_free(err)
    else:
        message = status_str(status)
        token = highest = pid = remaining_ms = os_code = 0
    if cls is LockedError:
        details = {"name": _text(name), "token": token, "pid": pid, "remaining": remaining_ms / 1000.0}
    elif cls is StaleTokenError:
        details = {"token": token, "highest": highest}
    elif cls is LockLostError:
        details = {"token": token, "current": highest or None}
    elif cls is PermitsMismatchError:
        details = {"permits": token, "requested": highest}
    elif cls is WouldDeadlockError:
        details = {"name": _text(name), "token": token}
    elif cls is ForkedError:
        message += _FORK_HINT
    number = (os_code or None) if cls is IoError else None  # fencelock_error_os_code: 0 for none
    if number is not None:
        cls = _BY_ERRNO.get(number, IoError)
    exc = cls(status, message)
    exc.__dict__.update(details)
    if isinstance(exc, OSError):
        if number is not None:
            exc.errno = number
            exc.strerror = os.strerror(number)
        if filename is not None:
            exc.filename = filename
    return exc
