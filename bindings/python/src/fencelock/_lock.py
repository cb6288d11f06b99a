"""Lock: a reusable lock object, ``store.lock(name, ...)``, usable as ``with``, ``async with`` and
as a decorator of sync and async functions (as filelock's and pottery's are). It keeps no lease
of its own: each entry acquires a new lease through the store and releases it on exit.

Which entry's Holder the exit releases is kept per thread and per asyncio task, in one
context variable (``_ENTERED``): a thread has a context of its own, and so does each task. That
is also how an entry that would wait for its own lease is found and refused.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ._args import _kind, _ms, _name, _type_error, _wait_ms
from ._holder import Holder
from ._types import Seconds

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["Lock"]

_F = TypeVar("_F", bound=Callable[..., Any])

# The entries of the current thread or task: (lock, holder) pairs, innermost last. A tuple,
# replaced rather than changed, so that a task's copy of its parent's context stays apart.
_ENTERED: contextvars.ContextVar[tuple[tuple[Lock, Holder], ...]] = contextvars.ContextVar(
    "fencelock_entered", default=()
)


class Lock:
    """A reusable lock: ``store.lock(name, ttl=30, timeout=0, keep_alive=True, shared=False,
    permits=None)``. Each entry (``with lock:``, ``async with lock:``, a call of a function it
    decorates) acquires a new lease, with a new token, as ``store.acquire`` (or
    ``store.acquire_async``) does with the same arguments, and releases it on exit; leaving
    after the lease was lost raises ``LockLostError``, as leaving ``with store.acquire(...)``
    does. With ``keep_alive=True`` (the default) the lease is renewed in the background every
    third of ``ttl`` while the entry lasts, so ``ttl`` bounds how long the lock stays taken when
    this process pauses or dies, not how long the block may run.

    ``holder`` and ``token`` are the current entry's Holder and token in the calling thread or
    task (None outside an entry): a decorated function fences its writes with ``lock.token``.

    Not reentrant: entering a lock that the same thread or task has already entered raises
    ``RuntimeError`` at once, since the nested entry would wait for the lease the outer one
    holds (the whole ``timeout``, or for ever with ``timeout=None`` and keep-alive). Other
    threads and tasks may enter the same object at the same time: each acquires its own lease,
    waiting as ``timeout`` says. A task started inside an entry copies its context, so it
    counts as having entered too. Arguments are checked when the lock is made.
    """

    __slots__ = ("__weakref__", "_keep_alive", "_name", "_permits", "_shared", "_store", "_timeout", "_ttl")

    def __init__(
        self,
        store: Store,
        name: str,
        ttl: Seconds = 30.0,
        *,
        timeout: Seconds | None = 0,
        keep_alive: bool = True,
        shared: bool = False,
        permits: int | None = None,
    ) -> None:
        _name(name, "lock name")
        _ms(ttl, "ttl")
        _wait_ms(timeout)
        _kind(shared, permits)
        if not isinstance(keep_alive, bool):
            raise _type_error("keep_alive", "bool", keep_alive)
        self._store = store
        self._name = name
        self._ttl = ttl
        self._timeout = timeout
        self._keep_alive = keep_alive
        self._shared = shared
        self._permits = permits

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._name

    @property
    def holder(self) -> Holder | None:
        """The Holder of the calling thread's or task's entry, or None outside one."""
        for lock, holder in _ENTERED.get():
            if lock is self:
                return holder
        return None

    @property
    def token(self) -> int | None:
        """The fencing token of the calling thread's or task's entry, or None outside one."""
        holder = self.holder
        return None if holder is None else holder.token

    def __repr__(self) -> str:
        return f"<fencelock.Lock {self._name!r} of {self._store!r}>"

    # -- with ---------------------------------------------------------------------------------

    def __enter__(self) -> Holder:
        self._refuse_reentry()
        return self._entered(
            self._store.acquire(
                self._name, self._ttl, timeout=self._timeout, shared=self._shared, permits=self._permits
            )
        )

    def __exit__(self, *exc: object) -> bool | None:
        return self._left().__exit__(*exc)

    # -- async with ---------------------------------------------------------------------------

    async def __aenter__(self) -> Holder:
        self._refuse_reentry()
        holder = await self._store.acquire_async(
            self._name, self._ttl, timeout=self._timeout, shared=self._shared, permits=self._permits
        )
        return self._entered(holder)

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._left().__aexit__(*exc)

    # -- decorator ----------------------------------------------------------------------------

    def __call__(self, fn: _F) -> _F:
        """Decorates ``fn`` so that each call runs inside an entry of this lock: ``async with``
        for an async callable, ``with`` otherwise. A generator function is refused
        (``TypeError``): its body runs only as the caller iterates, after the call returned.

        Which wrapper is decided here, from what ``fn`` is (``_code_kind``): a coroutine
        function, or a partial of one or an object whose ``__call__`` is one, is async. What
        inspection cannot see (a sync callable that returns a coroutine) is refused at the
        call: the sync wrapper closes the coroutine unrun and raises ``TypeError``, as the
        lease it would run under is released by then."""
        if not callable(fn):
            raise _type_error("the decorated object", "callable", fn)
        kind = _code_kind(fn)
        if kind == "generator":
            # Its body runs as the caller iterates, after the call (and the entry) returned.
            raise TypeError(
                f"a Lock cannot decorate the generator function {_describe(fn)}: its body would "
                "run after the lease was released; enter the lock inside it"
            )
        if kind == "coroutine":

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with self:
                    return await fn(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with self:
                result = fn(*args, **kwargs)
                if inspect.iscoroutine(result):
                    # Nothing of its body has run yet, and the entry ends here: refused loudly
                    # rather than left to run unlocked.
                    result.close()
                    raise TypeError(
                        f"{_describe(fn)}, decorated by a Lock as a sync function, returned a "
                        "coroutine: its body would run after the lease was released; decorate "
                        "the async def itself"
                    )
                return result

        return run  # type: ignore[return-value]

    # -- entries ------------------------------------------------------------------------------

    def _refuse_reentry(self) -> None:
        holder = self.holder
        if holder is not None:
            raise RuntimeError(
                f"fencelock Lock {self._name!r} is already entered by this thread or task (token "
                f"{holder.token}): a Lock is not reentrant, and a nested entry would wait for its "
                "own lease"
            )

    def _entered(self, holder: Holder) -> Holder:
        """Records the entry of a granted holder, after starting its keep-alive; a keep-alive
        that fails releases the holder."""
        try:
            if self._keep_alive:
                holder.keep_alive()
        except BaseException:
            holder.close()
            raise
        _ENTERED.set((*_ENTERED.get(), (self, holder)))
        return holder

    def _left(self) -> Holder:
        """Forgets the calling thread's or task's entry and returns its holder."""
        entries = _ENTERED.get()
        for index in range(len(entries) - 1, -1, -1):
            if entries[index][0] is self:
                _ENTERED.set(entries[:index] + entries[index + 1 :])
                return entries[index][1]
        raise RuntimeError(f"fencelock Lock {self._name!r} was not entered by this thread or task")


def _code_kind(fn: Callable[..., Any]) -> str:
    """``"coroutine"``, ``"generator"`` (sync or async) or ``"plain"``: what calling ``fn``
    makes, seen through ``functools.partial`` and an object's ``__call__``, which
    ``inspect.iscoroutinefunction`` alone does not look into for a callable object."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    candidates: list[Any] = [fn]
    if not (inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isclass(fn)):
        candidates.append(getattr(fn, "__call__", None))  # noqa: B004 - the method, not callable()
    for candidate in candidates:
        if inspect.isgeneratorfunction(candidate) or inspect.isasyncgenfunction(candidate):
            return "generator"
        if inspect.iscoroutinefunction(candidate):
            return "coroutine"
    return "plain"


def _describe(fn: Callable[..., Any]) -> str:
    """A decorated callable's name for a message: a callable object or a partial has none."""
    return getattr(fn, "__qualname__", None) or repr(fn)
