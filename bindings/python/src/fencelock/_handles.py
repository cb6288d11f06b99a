"""Handles: one base class gives every C object ``close()``, ``with`` and a finalizer."""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from ctypes import byref
from typing import Any, Callable, TypeVar

from ._errors import error_from
from ._ffi import ErrorP

_H = TypeVar("_H", bound="Handle")


class _Resource:
    """The C pointer of one handle, shared by the handle, its finalizer and its watcher threads.

    Invariant: the pointer is freed exactly once, after ``close()`` and after the last call that
    borrowed it returned, so closing a handle while another thread blocks in a call on it (a
    waiting acquire, a wait for a lost lease) never frees memory under that call.
    """

    __slots__ = ("__weakref__", "_borrows", "_closed", "_free", "_kind", "_lock", "_pid", "_ptr")

    def __init__(self, ptr: Any, free: Callable[[Any], None], kind: str) -> None:
        self._ptr = ptr
        self._free = free
        self._kind = kind
        self._lock = threading.Lock()
        self._borrows = 0
        self._closed = False
        self._pid = os.getpid()
        _LIVE.add(self)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def inherited(self) -> bool:
        """True in a child process that inherited the handle through ``os.fork()``."""
        return os.getpid() != self._pid

    def borrow(self) -> Any:
        with self._lock:
            if self._closed:
                raise ValueError(f"operation on a closed fencelock {self._kind}")
            self._borrows += 1
            return self._ptr

    def unborrow(self) -> None:
        with self._lock:
            self._borrows -= 1
            ptr = self._take()
        self._dispose(ptr)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ptr = self._take()
        self._dispose(ptr)

    def _take(self) -> Any:
        if self._closed and self._borrows == 0 and self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            return ptr
        return None

    def _dispose(self, ptr: Any) -> None:
        # A handle inherited through fork() belongs to the parent. Freeing it in the child could
        # act on the parent's behalf (a holder's free releases its lease; closing a store tears
        # down the database), so the child leaves its copy of the memory alone.
        if ptr is not None and not self.inherited:
            self._free(ptr)

    def call(self, fn: Callable[..., int], *args: Any) -> tuple[int, Any]:
        """Calls ``fn(ptr, *args, &err)``; returns the status and the error object."""
        err = ErrorP()
        ptr = self.borrow()
        try:
            status = fn(ptr, *args, byref(err))
        finally:
            self.unborrow()
        return status, err

    def check(self, fn: Callable[..., int], *args: Any) -> None:
        """Calls ``fn(ptr, *args, &err)`` and raises the matching FencelockError on failure."""
        status, err = self.call(fn, *args)
        if status:
            raise error_from(status, err)


_LIVE: weakref.WeakSet[_Resource] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held a handle's lock at the fork; in the child that
    # thread does not exist, so the lock would never be released. Calls on inherited handles
    # then reach C, which answers FENCELOCK_FORKED, instead of hanging.
    for resource in list(_LIVE):
        resource._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_quietly(resource: _Resource) -> None:
    # A finalizer must never raise: it runs from the garbage collector or at exit.
    with contextlib.suppress(Exception):
        resource.close()


class Handle:
    """Base of the objects that own a C handle: ``close()``, ``with`` and a finalizer.

    The finalizer (``weakref.finalize``) is a safety net that frees the C object when the Python
    object is collected or the interpreter exits; call ``close()`` (or use ``with``) to free it
    at a known time.
    """

    _kind = "handle"

    def __init__(self, ptr: Any, free: Callable[[Any], None]) -> None:
        self._res = _Resource(ptr, free, self._kind)
        self._finalizer = weakref.finalize(self, self._finalize_fn(), self._res)

    @staticmethod
    def _finalize_fn() -> Callable[[_Resource], None]:
        return _close_quietly

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._res.closed

    def close(self) -> None:
        """Frees the C object. Idempotent; further calls on the handle raise ``ValueError``."""
        self._finalizer()

    def __enter__(self: _H) -> _H:  # noqa: PYI019 - typing.Self needs Python 3.11
        if self._res.closed:
            raise ValueError(f"operation on a closed fencelock {self._kind}")
        return self

    def __exit__(self, *exc: object) -> bool | None:
        self.close()
        return None
