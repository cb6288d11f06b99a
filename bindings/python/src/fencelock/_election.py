"""Leader election: ``Leadership`` (a won campaign, resigned on exit) and ``LeaderWatch`` (every
change of an election's leader, as an iterator and an async iterator). The C ABI's
``fencelock_leadership`` and ``fencelock_leader_watch`` shaped into Python idioms; the rules
(fair campaigns, the safety margin, fencing by the term, the order of changes) live in the
library."""

from __future__ import annotations

import asyncio
from ctypes import byref, c_bool, c_size_t, string_at
from typing import Any, AsyncIterator, Iterator

from . import _ffi
from ._args import _FOREVER_MS, _bytes, _datetime, _key, _ms, _name
from ._errors import LockLostError, error_from
from ._ffi import LeaderP, lib
from ._handles import Handle
from ._types import Key, Leader, Seconds, Value

__all__ = ["LeaderWatch", "Leadership"]


def _leader_from(ptr: Any) -> Leader:
    """Copies a ``fencelock_leader`` into a ``Leader`` and frees it."""
    try:
        length = c_size_t()
        value = lib.fencelock_leader_value(ptr, byref(length))
        raw_name: bytes = lib.fencelock_leader_name(ptr)
        return Leader(
            name=raw_name.decode("utf-8"),
            term=lib.fencelock_leader_term(ptr),
            version=lib.fencelock_leader_version(ptr),
            value=string_at(value, length.value),
            pid=lib.fencelock_leader_pid(ptr),
            since=_datetime(lib.fencelock_leader_since_unix_ms(ptr)),
        )
    finally:
        lib.fencelock_leader_free(ptr)


class Leadership(Handle):
    """A won campaign, returned by ``Store.campaign``; not created directly.

    ``term`` is the grant's token: higher than every earlier term's, and the fencing token of
    ``put``, ``delete`` and ``fence``, which the store refuses once the leadership ended. The
    lease is kept alive in the background; the leadership ends for its holder a safety margin
    before that lease could be granted to another (``is_lost``, ``wait_lost``). As a context
    manager it resigns on exit, so the next candidate leads at once; ``close()`` and the
    finalizer resign too. Safe to use from many threads at once.
    """

    _kind = "leadership"

    def __init__(self, ptr: Any, value: bytes) -> None:
        self._term: int = lib.fencelock_leadership_term(ptr)
        raw_name: bytes = lib.fencelock_leadership_name(ptr)
        self._name = raw_name.decode("utf-8")
        # The C ABI tells no leadership's value: kept as this object last set it.
        self._value = value
        super().__init__(ptr, lib.fencelock_leadership_free)

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<fencelock.Leadership {self._name!r} term={self._term}{state}>"

    def __exit__(self, *exc: object) -> bool | None:
        """Resigns. Raises ``LockLostError`` when the lease was lost inside the block (what the
        block did as leader was not protected to the end); when the block raised, its exception
        propagates instead, with a note."""
        try:
            self.resign()
        except LockLostError as lost:
            if exc[1] is None:
                raise
            if hasattr(exc[1], "add_note"):  # Python 3.11+
                exc[1].add_note(str(lost))
        finally:
            self.close()
        return None

    async def __aenter__(self) -> Leadership:  # noqa: PYI034 - typing.Self needs Python 3.11
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> bool | None:
        """As ``__exit__``; the resign runs in a thread, as it may wait behind a busy store."""
        loop = asyncio.get_running_loop()
        return await asyncio.shield(loop.run_in_executor(None, lambda: self.__exit__(*exc)))

    @property
    def term(self) -> int:
        """The term: the token of the grant, and the fencing token of the leader's writes."""
        return self._term

    @property
    def name(self) -> str:
        """The election's name."""
        return self._name

    @property
    def value(self) -> bytes:
        """The leader's value, as the campaign or the last ``proclaim`` of this object set it."""
        return self._value

    @property
    def is_lost(self) -> bool:
        """Whether the leadership ended for its holder: resigned, its lease lost, or less than
        the safety margin left on it. Once true, always true; True once closed. Reads no
        storage."""
        if self.closed:
            return True
        ptr = self._res.borrow()
        try:
            lost: bool = lib.fencelock_leadership_is_lost(ptr)
        finally:
            self._res.unborrow()
        return lost

    def wait_lost(self, timeout: Seconds | None = None) -> bool:
        """Blocks until the leadership ends for its holder (see ``is_lost``), woken at once by
        the end, or ``timeout`` seconds pass (None: no limit). Returns whether it ended.
        Releases the GIL; Ctrl-C ends the wait at once, and so does closing the leadership from
        another thread (``ValueError``)."""
        timeout_ms = _FOREVER_MS if timeout is None else _ms(timeout, "timeout", allow_zero=True)
        lost = c_bool()
        self._res.check_wait(lib.fencelock_leadership_wait_lost, (timeout_ms,), (byref(lost),))
        return lost.value

    async def wait_lost_async(self, timeout: Seconds | None = None) -> bool:
        """``wait_lost`` for asyncio: cancelling the awaiting task ends the wait in the library
        before ``CancelledError`` propagates."""
        timeout_ms = _FOREVER_MS if timeout is None else _ms(timeout, "timeout", allow_zero=True)
        lost = c_bool()
        await self._res.check_wait_async(lib.fencelock_leadership_wait_lost, (timeout_ms,), (byref(lost),))
        return lost.value

    def proclaim(self, value: Value) -> None:
        """Changes the leader's value (its address, say): the next version of the leader record,
        fenced by the term, told to every observer. Raises ``LockLostError`` once the
        leadership ended (nothing written)."""
        raw = _bytes(value, "value")
        self._res.check(lib.fencelock_leadership_proclaim, raw, len(raw))
        self._value = raw

    def put(self, key: Key, value: Value) -> None:
        """Writes ``value`` under ``key`` fenced by the term, with the lease checked in the same
        transaction. Raises ``LockLostError`` once the leadership ended, ``StaleTokenError``
        when the key accepted a higher token."""
        raw_key = _key(key)
        raw_value = _bytes(value, "value")
        self._res.check(lib.fencelock_leadership_put, raw_key, len(raw_key), raw_value, len(raw_value))

    def delete(self, key: Key) -> bool:
        """Deletes ``key`` fenced by the term, checked like ``put``. Returns whether the key held
        a value."""
        raw_key = _key(key)
        existed = c_bool()
        self._res.check(lib.fencelock_leadership_delete, raw_key, len(raw_key), byref(existed))
        return existed.value

    def fence(self, resource: str) -> None:
        """Checks the term at the external fence ``resource`` (``Store.fence``), for storage of
        your own. Raises ``LockLostError`` once the leadership ended, ``StaleTokenError`` when
        the fence accepted a higher token."""
        self._res.check(lib.fencelock_leadership_fence, _name(resource, "resource"))

    def resign(self) -> None:
        """Steps down at once: the next candidate leads without waiting for the lease to run
        out. The first resign of a leadership whose lease was lost before it raises
        ``LockLostError``; any later one does nothing, and so does one after ``close()``."""
        if self.closed:
            return
        self._res.check(lib.fencelock_leadership_resign)


class LeaderWatch(Handle):
    """Every change of an election's leader, from ``Store.observe``; not created directly.

    Iterate it (``for leader in watch``) or iterate it from asyncio (``async for leader in
    watch``): it yields the leader of the time of the ``observe`` call first (if one led), then
    each new term and each ``proclaim``, in order, never going back, woken by the change itself.
    The iteration ends only when the watch is closed (``close()``, or the end of a ``with``
    block); Ctrl-C ends a blocked ``for`` at once, and cancelling the task a blocked ``async
    for``. Observing changes nothing the candidates see.
    """

    _kind = "leader watch"

    def __init__(self, ptr: Any) -> None:
        super().__init__(ptr, lib.fencelock_leader_watch_free)

    def next(self, timeout: Seconds | None = None) -> Leader | None:
        """The next change, waiting up to ``timeout`` seconds (None: no limit); None when none
        came. Raises ``ValueError`` once the watch is closed."""
        timeout_ms = _FOREVER_MS if timeout is None else _ms(timeout, "timeout", allow_zero=True)
        out = LeaderP()
        status, err = self._res.wait(
            lib.fencelock_leader_watch_next,
            (timeout_ms,),
            (byref(out),),
            lambda: lib.fencelock_leader_free(out),
        )
        return self._leader(status, err, out)

    async def next_async(self, timeout: Seconds | None = None) -> Leader | None:
        """``next`` for asyncio: cancelling the awaiting task ends the wait in the library before
        ``CancelledError`` propagates."""
        timeout_ms = _FOREVER_MS if timeout is None else _ms(timeout, "timeout", allow_zero=True)
        out = LeaderP()
        status, err = await self._res.wait_async(
            lib.fencelock_leader_watch_next,
            (timeout_ms,),
            (byref(out),),
            lambda: lib.fencelock_leader_free(out),
        )
        return self._leader(status, err, out)

    @staticmethod
    def _leader(status: int, err: Any, out: Any) -> Leader | None:
        if status == _ffi.TIMEOUT:
            if err:
                lib.fencelock_error_free(err)
            return None
        if status:
            raise error_from(status, err)
        return _leader_from(out)

    def __iter__(self) -> Iterator[Leader]:
        return self

    def __next__(self) -> Leader:
        try:
            leader = self.next()
        except ValueError:
            if self.closed:
                raise StopIteration from None
            raise
        assert leader is not None  # no timeout, so a change came
        return leader

    def __aiter__(self) -> AsyncIterator[Leader]:
        return self

    async def __anext__(self) -> Leader:
        try:
            leader = await self.next_async()
        except ValueError:
            if self.closed:
                raise StopAsyncIteration from None
            raise
        assert leader is not None  # no timeout, so a change came
        return leader
