"""Store: the C ABI's store handle shaped into Python idioms, and its observer slot. No locking
logic lives here."""

from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_bool, c_char_p, c_int32, c_size_t, c_uint32, c_uint64, string_at
from typing import Any, Callable, Generator, Generic, Protocol, TypeVar

from . import _ffi
from ._args import (
    _U64_MAX,
    _bytes,
    _datetime,
    _datetime_or_none,
    _key,
    _kind,
    _lock_state,
    _mode,
    _ms,
    _name,
    _names,
    _token,
    _type_error,
    _wait_ms,
)
from ._election import Leadership, LeaderWatch, _leader_from
from ._enums import Ending, EventKind, LockKind, Mode, Scope
from ._errors import LockTimeoutError, error_from
from ._ffi import (
    BytesP,
    HistoryP,
    HolderP,
    KeyListP,
    LeaderP,
    LeadershipP,
    LeaderWatchP,
    LockListP,
    StoreP,
    WaiterListP,
    lib,
)
from ._handles import Cancel, Handle, call_waiting
from ._holder import Holder
from ._lock import Lock
from ._types import (
    Event,
    Fenced,
    HistoryEntry,
    Key,
    Leader,
    LockInfo,
    Metrics,
    PathLike,
    Seconds,
    Value,
    WaiterInfo,
)

__all__ = ["Store"]


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



def _options(
    ttl_ms: int,
    timeout_ms: int,
    kind: LockKind = LockKind.EXCLUSIVE,
    permits: int = 0,
    *,
    put: tuple[bytes, bytes] | None = None,
) -> _ffi.fencelock_acquire_options:
    """The options of one acquire: a timeout of 0 tries once, another waits (``_wait_ms``)."""
    options = _ffi.fencelock_acquire_options(
        size=ctypes.sizeof(_ffi.fencelock_acquire_options), ttl_ms=ttl_ms, kind=int(kind), permits=permits
    )
    if timeout_ms:
        options.flags |= _ffi.ACQUIRE_WAIT
        options.timeout_ms = timeout_ms
    if put is not None:
        key, value = put
        options.flags |= _ffi.ACQUIRE_PUT
        options.key, options.key_len, options.value, options.value_len = key, len(key), value, len(value)
    return options


def _acquire_opts(store: Any, names: Any, count: int, options: Any, cancel: Any, outs: Any, err: Any) -> int:
    """``fencelock_store_acquire_opts`` in the shape of ``call_waiting``'s calls, whose cancel
    handle travels in the options."""
    options.cancel = cancel
    return int(lib.fencelock_store_acquire_opts(store, names, count, byref(options), outs, err))


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
    ``write_log=True``: in multi-process mode, fenced writes (puts, deletes, fences, an
    acquire's write) go to a redo log beside the store file (``PATH.wal.*``) instead of a
    commit of the file: one ``fdatasync`` shared by the processes writing at that moment, and no
    process stopped in a write holds another's. The first process that opens the store decides
    for every process that has it open at the same time (the others follow it, whatever their
    own setting); the last to close it leaves it one file again. No effect in single-process
    mode. Off by default while it is new.

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
        write_log: bool = False,
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
        if not isinstance(write_log, bool):
            raise _type_error("write_log", "bool", write_log)
        flags = (
            (_ffi.OPEN_READ_ONLY if read_only else 0)
            | (0 if history else _ffi.OPEN_NO_HISTORY)
            | (_ffi.OPEN_WRITE_LOG if write_log else 0)
        )
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
        try:
            return self._acquire([raw_name], _options(ttl_ms, timeout_ms, kind, count))[0]
        except LockTimeoutError as err:
            if timeout is not None and timeout_ms != 0:
                err.waited_for(name, timeout_ms / 1000.0)
            raise

    def lock(
        self,
        name: str,
        ttl: Seconds = 30.0,
        *,
        timeout: Seconds | None = 0,
        keep_alive: bool = True,
        shared: bool = False,
        permits: int | None = None,
    ) -> Lock:
        """A reusable ``Lock`` of ``name``, usable as ``with``, ``async with`` and as a decorator
        of sync and async functions; each entry acquires a new lease (a new token) as
        ``acquire`` does with ``ttl``, ``timeout``, ``shared`` and ``permits``, renewed in the
        background while the entry lasts (``keep_alive=True``), and releases it on exit. Not
        reentrant: a thread or task that enters it twice gets ``RuntimeError``. See ``Lock``."""
        return Lock(self, name, ttl, timeout=timeout, keep_alive=keep_alive, shared=shared, permits=permits)

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
        return self._acquire(raw, _options(ttl_ms, timeout_ms))

    def acquire_async(
        self,
        name: str,
        ttl: Seconds = 30.0,
        *,
        timeout: Seconds | None = 0,
        shared: bool = False,
        permits: int | None = None,
    ) -> _AwaitOrEnter[Holder]:
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
        return _AwaitOrEnter(self._acquire_async(raw_name, _options(ttl_ms, timeout_ms, kind, count)))

    async def _acquire_async(self, raw_name: bytes, options: _ffi.fencelock_acquire_options) -> Holder:
        names, outs = (c_char_p * 1)(raw_name), (HolderP * 1)()
        await self._res.check_wait_async(
            _acquire_opts, (names, 1, options), (outs,), lambda: lib.fencelock_holder_free(outs[0])
        )
        return Holder(outs[0], options.ttl_ms, self._res.keep)

    def _acquire(self, raw_names: list[bytes], options: _ffi.fencelock_acquire_options) -> list[Holder]:
        """The one C call of every acquire: tried once directly, or a wait that a signal, a
        close or the store's cancel ends (``call_waiting``)."""
        count = len(raw_names)
        names, outs = (c_char_p * count)(*raw_names), (HolderP * count)()

        def undo() -> None:
            for out in outs:
                lib.fencelock_holder_free(out)

        if options.flags & _ffi.ACQUIRE_WAIT:
            self._res.check_wait(_acquire_opts, (names, count, options), (outs,), undo)
        else:
            self._res.check(lib.fencelock_store_acquire_opts, names, count, byref(options), outs)
        return [Holder(out, options.ttl_ms, self._res.keep) for out in outs]

    def acquire_and_put(self, name: str, key: Key, value: Value, ttl: Seconds = 30.0) -> Holder:
        """Acquires the lock ``name`` and writes ``value`` under ``key`` with the new token, in one
        transaction: both happen or neither. Raises ``LockedError`` when the lock is held."""
        raw_name = _name(name, "lock name")
        raw_key = _key(key)
        raw_value = _bytes(value, "value")
        options = _options(_ms(ttl, "ttl"), 0, put=(raw_key, raw_value))
        return self._acquire([raw_name], options)[0]

    # -- leader election ------------------------------------------------------------------------

    def campaign(
        self,
        name: str,
        value: Value = b"",
        *,
        ttl: Seconds = 15.0,
        margin: Seconds | None = None,
        timeout: Seconds | None = None,
    ) -> Leadership:
        """Campaigns to lead the election ``name`` with ``value`` (the candidate's address, say)
        and returns the ``Leadership`` once it leads: ``with store.campaign("scheduler",
        b"node-a") as leadership:`` resigns on exit.

        Candidates are granted fairly, oldest first, across processes. The leader holds the
        lock ``name`` for a lease of ``ttl`` seconds, kept alive in the background; its
        leadership ends for it ``margin`` seconds (None: a third of ``ttl``; at most half)
        before that lease could be granted to another. ``timeout`` bounds the wait (None, the
        default: no limit; then ``LockTimeoutError``). The wait releases the GIL; Ctrl-C ends
        it at once, and so does closing the store from another thread (``ValueError``). A
        campaign that ends while it waits leaves nothing behind. Raises ``WouldDeadlockError``
        when this thread leads the election already through this store."""
        args = self._campaign_args(name, value, ttl, margin, timeout)
        out = LeadershipP()
        self._res.check_wait(
            lib.fencelock_store_campaign, args, (byref(out),), lambda: lib.fencelock_leadership_free(out)
        )
        return Leadership(out, args[1])

    def campaign_async(
        self,
        name: str,
        value: Value = b"",
        *,
        ttl: Seconds = 15.0,
        margin: Seconds | None = None,
        timeout: Seconds | None = None,
    ) -> _AwaitOrEnter[Leadership]:
        """``campaign`` for asyncio: ``leadership = await store.campaign_async(...)``, or ``async
        with store.campaign_async(...) as leadership:``, which resigns on exit. Cancelling the
        task ends the wait in the library; a leadership won in the race is resigned before
        ``CancelledError`` propagates. Arguments are checked at the call."""
        return _AwaitOrEnter(self._campaign_async(self._campaign_args(name, value, ttl, margin, timeout)))

    async def _campaign_async(self, args: tuple[Any, ...]) -> Leadership:
        out = LeadershipP()
        await self._res.check_wait_async(
            lib.fencelock_store_campaign, args, (byref(out),), lambda: lib.fencelock_leadership_free(out)
        )
        return Leadership(out, args[1])

    @staticmethod
    def _campaign_args(
        name: str, value: Value, ttl: Seconds, margin: Seconds | None, timeout: Seconds | None
    ) -> tuple[Any, ...]:
        raw_name, raw_value = _name(name, "election name"), _bytes(value, "value")
        margin_ms = 0 if margin is None else _ms(margin, "margin")
        return (raw_name, raw_value, len(raw_value), _ms(ttl, "ttl"), margin_ms, _wait_ms(timeout))

    def leader(self, name: str) -> Leader | None:
        """The current leader of the election ``name``: the live holder of its lock, with its
        record; None while nobody leads."""
        out = LeaderP()
        status, err = self._res.call(lib.fencelock_store_leader, _name(name, "election name"), byref(out))
        if status == _ffi.NOT_FOUND:
            if err:
                lib.fencelock_error_free(err)
            return None
        if status:
            raise error_from(status, err)
        return _leader_from(out)

    def observe(self, name: str) -> LeaderWatch:
        """Watches the election ``name``: ``for leader in store.observe(name):``, or ``async for
        leader in store.observe(name):``, yields the current leader first (if one leads), then
        every change (each new term, each proclaim) in order of terms, never going back, woken
        by the change, not by polling. An observer that is not waiting when the value changes
        twice within a term is told the later version only; no term is passed over (unless more
        than 64 began meanwhile). Close the watch (or use ``with``) to end the iteration."""
        out = LeaderWatchP()
        self._res.check(lib.fencelock_store_observe_leader, _name(name, "election name"), byref(out))
        return LeaderWatch(out)

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

    def waiters(self, name: str) -> list[WaiterInfo]:
        """The acquires of any process of this host queued waiting for the lock ``name``,
        oldest first (the order they are served in); empty for a store opened in
        single-process mode, whose waits are not queued. The library checks the name: an empty
        one raises ``InvalidArgumentError``, as does an etcd store."""
        if not isinstance(name, str):
            raise _type_error("lock name", "str", name)
        if "\0" in name:
            raise ValueError("lock name contains a NUL character")
        out = WaiterListP()
        self._res.check(lib.fencelock_store_waiters, name.encode("utf-8"), byref(out))
        try:
            result = []
            info = _ffi.fencelock_waiter_info()
            for index in range(lib.fencelock_waiter_list_len(out)):
                status = lib.fencelock_waiter_list_get(out, index, byref(info))
                if status:
                    raise error_from(status, None)
                result.append(
                    WaiterInfo(
                        name=info.name.decode("utf-8"),
                        pid=info.pid,
                        ticket=info.ticket,
                        waiting_since=_datetime(info.waiting_since_unix_ms),
                        waited=info.waited_ms / 1000.0,
                    )
                )
            return result
        finally:
            lib.fencelock_waiter_list_free(out)

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
            live_exclusive=out.live_exclusive,
            live_shared=out.live_shared,
            live_permits=out.live_permits,
            queued_waiters=out.queued_waiters,
            file_bytes=out.file_bytes,
            history_dropped=out.history_dropped,
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


class _AsyncExit(Protocol):
    async def __aexit__(self, *exc: object) -> bool | None: ...


_Entered = TypeVar("_Entered", bound=_AsyncExit)


class _AwaitOrEnter(Generic[_Entered]):
    """What ``Store.acquire_async`` and ``Store.campaign_async`` return: awaitable (the Holder, the
    Leadership) and an async context manager (the same, released or resigned on exit)."""

    __slots__ = ("_coro", "_entered")

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self._entered: _Entered | None = None

    def __await__(self) -> Generator[Any, None, _Entered]:
        return self._coro.__await__()  # type: ignore[no-any-return]

    async def __aenter__(self) -> _Entered:
        self._entered = await self._coro
        return self._entered

    async def __aexit__(self, *exc: object) -> None:
        assert self._entered is not None
        await self._entered.__aexit__(*exc)
