"""Holder: a granted lease, its release on exit and at collection, and its loss watch."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import threading
import warnings
import weakref
from ctypes import byref, c_bool, c_uint64
from typing import Any, Callable

from . import _ffi
from ._args import _FOREVER_MS, _bytes, _key, _ms, _type_error
from ._enums import LockKind
from ._errors import LockLostError
from ._ffi import lib
from ._handles import Handle, _close_quietly, _Resource
from ._types import Key, Seconds, Value

__all__ = ["Holder", "HolderDroppedWarning"]


class HolderDroppedWarning(RuntimeWarning):
    """A ``Holder`` was garbage-collected unused while its lease was live, so its finalizer
    released the lease at once: nothing kept the holder, as after a bare ``store.acquire(...)``
    statement. Keep it as long as the lock is needed, best with ``with store.acquire(...) as
    holder:``. (A holder used and then dropped is released by the finalizer silently.)"""


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
        """Releases the lease (see ``release``) and frees the handle. Idempotent. Quiet about a
        lease lost before it, as a finalizer is: call ``release()`` first (or use ``with``) to
        learn of a loss."""
        try:
            if not self.closed and not self._res.inherited:
                with contextlib.suppress(LockLostError):
                    self.release()
        finally:
            super().close()

    def release(self) -> None:
        """Releases the lease; other processes see it free at once. A stale holder's release
        never touches its successor's lease. Token and name stay readable.

        The first release of a lease lost before it (it expired, or another holder took the
        lock over) lets go of what was still its own and raises ``LockLostError``, as redis-py's
        ``LockNotOwnedError`` and a ``with`` block's exit do: the work done under the lease may
        have overlapped another holder's. Its fenced writes after the loss were refused; side
        effects that no fence checked must be checked by the caller. Any later release does
        nothing."""
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

    @property
    def remaining(self) -> float:
        """The time left on the lease as this holder last set it, in seconds (millisecond
        precision); 0.0 once it ran out. Reads no storage; whether another holder took the lock
        is answered by ``held()``."""
        remaining_ms = c_uint64()
        self._res.check(lib.fencelock_holder_remaining_ms, byref(remaining_ms))
        return remaining_ms.value / 1000.0

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
