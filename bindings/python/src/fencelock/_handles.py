"""Handles: one base class gives every C object ``close()``, ``with`` and a finalizer; and the two
helpers through which every blocking C call is made (``call_waiting``, and ``call_waiting_async``
for asyncio)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from ctypes import byref
from typing import Any, Callable, Optional, TypeVar

from . import _ffi
from ._errors import error_from
from ._ffi import CancelP, ErrorP, lib

_H = TypeVar("_H", bound="Handle")


class _Resource:
    """The C pointer of one handle, shared by the handle, its finalizer and its watcher threads.

    Invariant: the pointer is freed exactly once, after ``close()`` and after the last call that
    borrowed it returned, so closing a handle while another thread blocks in a call on it (a
    waiting acquire, a wait for a lost lease) never frees memory under that call.

    ``keep`` holds Python objects the C object may call into (a store's observer callback, which
    its holders call too): they live at least as long as the resource, so past the free.
    """

    __slots__ = (
        "__weakref__",
        "_borrows",
        "_closed",
        "_free",
        "_kind",
        "_lock",
        "_pid",
        "_ptr",
        "_waits",
        "keep",
    )

    def __init__(self, ptr: Any, free: Callable[[Any], None], kind: str) -> None:
        self._ptr = ptr
        self._free = free
        self._kind = kind
        self._lock = threading.Lock()
        self._borrows = 0
        self._closed = False
        self._pid = os.getpid()
        # The cancel handles of the calls blocked on this handle; close() fires them.
        self._waits: set[Cancel] = set()
        self.keep: Any = None
        _LIVE.add(self)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def inherited(self) -> bool:
        """True in a child process that inherited the handle through ``os.fork()``."""
        return os.getpid() != self._pid

    def borrow(self, cancel: Cancel | None = None) -> Any:
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._borrows += 1
            if cancel is not None:
                self._waits.add(cancel)
            return self._ptr

    def unborrow(self, cancel: Cancel | None = None) -> None:
        with self._lock:
            self._borrows -= 1
            if cancel is not None:
                self._waits.discard(cancel)
            ptr = self._take()
        self._dispose(ptr)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            # Blocked calls end at once (FENCELOCK_CANCELLED), so the free below is not delayed
            # by a wait; they raise ValueError, as any call on a closed handle does.
            for cancel in self._waits:
                cancel.fire()
            ptr = self._take()
        self._dispose(ptr)

    def _closed_error(self) -> ValueError:
        return ValueError(f"operation on a closed fencelock {self._kind}")

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

    def wait(
        self, fn: Callable[..., int], args: tuple[Any, ...], outs: tuple[Any, ...], undo: Undo = None
    ) -> tuple[int, Any]:
        """``call_waiting`` on this handle: ``fn(ptr, *args, cancel, *outs, &err)``, ended at once
        by ``close()`` (then ValueError). Returns the status and the error object."""
        cancel = Cancel()
        ptr = self.borrow(cancel)
        try:
            status, err = call_waiting(fn, (ptr, *args), outs, cancel, undo)
        finally:
            self.unborrow(cancel)
        return self._waited(status, err)

    async def wait_async(
        self,
        fn: Callable[..., int],
        args: tuple[Any, ...],
        outs: tuple[Any, ...],
        undo: Undo = None,
        *,
        cancellable: bool = True,
    ) -> tuple[int, Any]:
        """``wait`` for asyncio (``call_waiting_async``): cancelling the awaiting task ends the
        C call (``cancellable=False``: ``fn`` takes no cancel handle, and is waited for). The
        borrow ends only after the C call did, so ``close()`` never frees under it."""
        cancel = Cancel() if cancellable else None
        ptr = self.borrow(cancel)
        try:
            status, err = await call_waiting_async(fn, (ptr, *args), outs, cancel, undo)
        finally:
            self.unborrow(cancel)
        return self._waited(status, err)

    def _waited(self, status: int, err: Any) -> tuple[int, Any]:
        if status == _ffi.CANCELLED:
            # Only close() fires this cancel outside the helpers, which raise for their own.
            if err:
                lib.fencelock_error_free(err)
            raise self._closed_error()
        return status, err

    async def check_wait_async(
        self,
        fn: Callable[..., int],
        args: tuple[Any, ...],
        outs: tuple[Any, ...],
        undo: Undo = None,
        *,
        cancellable: bool = True,
    ) -> None:
        """``wait_async``, raising the matching FencelockError on failure."""
        status, err = await self.wait_async(fn, args, outs, undo, cancellable=cancellable)
        if status:
            raise error_from(status, err)

    def check_wait(
        self, fn: Callable[..., int], args: tuple[Any, ...], outs: tuple[Any, ...], undo: Undo = None
    ) -> None:
        """``wait``, raising the matching FencelockError on failure."""
        status, err = self.wait(fn, args, outs, undo)
        if status:
            raise error_from(status, err)


Undo = Optional[Callable[[], None]]
"""Frees what a blocking call returned when its caller was interrupted after all."""


class Cancel:
    """A ``fencelock_cancel``, freed when the last reference goes: the thread that fires it and
    the thread blocked in C with it may each outlive the other's interest in it."""

    __slots__ = ("__weakref__", "ptr")

    def __init__(self) -> None:
        self.ptr = CancelP()
        err = ErrorP()
        status = lib.fencelock_cancel_new(byref(self.ptr), byref(err))
        if status:
            raise error_from(status, err)
        # Not at interpreter exit: a daemon thread may still be blocked in C with it.
        weakref.finalize(self, lib.fencelock_cancel_free, self.ptr).atexit = False

    def fire(self) -> None:
        lib.fencelock_cancel_fire(self.ptr)

    def set_thread(self, thread: int) -> None:
        """Makes the call given this cancel the wait of ``thread`` (``fencelock_thread_self()``
        read on that thread), however many threads away it runs."""
        err = ErrorP()
        status = lib.fencelock_cancel_set_thread(self.ptr, thread, byref(err))
        if status:
            raise error_from(status, err)


def call_waiting(
    fn: Callable[..., int], args: tuple[Any, ...], outs: tuple[Any, ...], cancel: Cancel, undo: Undo = None
) -> tuple[int, Any]:
    """Makes one blocking ``*_cancellable`` C call, ``fn(*args, cancel, *outs, &err)``, so that a
    signal ends it: the one way the binding blocks. Returns the status and the error object.

    Python runs signal handlers in the main thread only, and only between bytecodes, never while
    that thread is inside C. So on the main thread the call runs in a worker thread while the
    main thread waits for it in ``Event.wait``, which a signal interrupts. When that wait raises
    (``KeyboardInterrupt``, or whatever a signal handler raised) the cancel fires, the worker's
    call ends within about a millisecond with FENCELOCK_CANCELLED (nothing changed), what the
    call returned if it finished first anyway is undone (``undo``: a holder is freed, which
    releases it; a store is closed), and the exception propagates. The cancel names the main
    thread as the one the call is for, so that the library judges the wait, and records what it
    grants, as the main thread's, not the worker's. Other threads call directly.
    """
    err = ErrorP()

    def invoke() -> int:
        return fn(*args, cancel.ptr, *outs, byref(err))

    if threading.current_thread() is not threading.main_thread():
        return invoke(), err
    cancel.set_thread(lib.fencelock_thread_self())
    outcome: list[Any] = []
    done = threading.Event()

    def work() -> None:
        try:
            outcome.append(invoke())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=work, name="fencelock-wait", daemon=True)
    try:
        worker.start()
        done.wait()
    except BaseException:
        cancel.fire()
        # A call already begun ends within a millisecond; one not begun yet ends at once. A
        # second signal meanwhile does not cut this short: the worker's outputs are still ours.
        while worker.ident is not None and not done.is_set():
            with contextlib.suppress(BaseException):
                done.wait()
        if outcome and outcome[0] == _ffi.OK and undo is not None:
            undo()
        elif err:
            lib.fencelock_error_free(err)
        raise
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result, err


async def call_waiting_async(
    fn: Callable[..., int],
    args: tuple[Any, ...],
    outs: tuple[Any, ...],
    cancel: Cancel | None,
    undo: Undo = None,
) -> tuple[int, Any]:
    """Makes one blocking C call, ``fn(*args, cancel, *outs, &err)`` (``fn(*args, *outs, &err)``
    when ``cancel`` is None), from asyncio: the call runs in a thread of its own (not the
    loop's default executor, which a few long waits would fill) and the awaiting task waits for
    its result. Returns the status and the error object.

    When the task is cancelled (``task.cancel()``, ``asyncio.wait_for`` or ``asyncio.timeout``
    running out, Ctrl-C under ``asyncio.run``) the cancel fires, the call ends within about a
    millisecond with FENCELOCK_CANCELLED (nothing changed), and the task waits for that end
    before ``CancelledError`` propagates; what the call returned if it finished first anyway is
    undone (``undo``: a holder is freed, which releases it). So a cancelled wait leaves no thread
    behind that could take the lock later. A call without a cancel handle (a try-once acquire,
    bounded by the store's busy timeout) is waited for and undone the same way."""
    loop = asyncio.get_running_loop()
    err = ErrorP()
    done: asyncio.Future[Any] = loop.create_future()

    def deliver(outcome: Any) -> None:
        if not done.done():
            done.set_result(outcome)

    def work() -> None:
        try:
            if cancel is None:
                outcome: Any = fn(*args, *outs, byref(err))
            else:
                outcome = fn(*args, cancel.ptr, *outs, byref(err))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            outcome = exc
        try:
            loop.call_soon_threadsafe(deliver, outcome)
        except RuntimeError:  # the loop is closed: nobody will take what the call returned
            if outcome == _ffi.OK and undo is not None:
                undo()
            elif err:
                lib.fencelock_error_free(err)

    threading.Thread(target=work, name="fencelock-wait", daemon=True).start()
    try:
        outcome = await asyncio.shield(done)
    except asyncio.CancelledError:
        if cancel is not None:
            cancel.fire()
        # The outputs stay ours until the call ended: a second cancel does not cut this short.
        while not done.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(done)
        outcome = done.result()
        if outcome == _ffi.OK and undo is not None:
            undo()
        elif err:
            lib.fencelock_error_free(err)
        raise
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome, err


_LIVE: weakref.WeakSet[_Resource] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held a handle's lock at the fork; in the child that
    # thread does not exist, so the lock would never be released. Calls on inherited handles
    # then reach C, which answers FENCELOCK_FORKED, instead of hanging.
    for resource in list(_LIVE):
        resource._lock = threading.Lock()
        resource._waits = set()  # their threads did not cross the fork


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
