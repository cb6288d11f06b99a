"""Argument checks: a bad argument raises TypeError/ValueError here, before reaching C; and the
conversions of the C ABI's numbers (milliseconds, Unix times) to Python's."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

from . import _ffi
from ._enums import LockKind, LockState, Mode

_U64_MAX = (1 << 64) - 1
# A timeout the library saturates: no limit.
_FOREVER_MS = _U64_MAX


def _type_error(what: str, expected: str, value: Any) -> TypeError:
    return TypeError(f"{what} must be {expected}, not {type(value).__name__}")


def _name(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise _type_error(what, "str", value)
    if not value:
        raise ValueError(f"{what} is empty")
    if "\0" in value:
        raise ValueError(f"{what} contains a NUL character")
    return value.encode("utf-8")


def _bytes(value: Any, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise _type_error(what, "bytes or str", value)


def _key(value: Any, what: str = "key") -> bytes:
    key = _bytes(value, what)
    if not key:
        raise ValueError(f"{what} is empty")
    return key


def _token(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error("token", "int", value)
    if not 0 < value <= _U64_MAX:
        raise ValueError(f"token {value} is out of range: tokens are 1 to 2**64-1")
    return value


def _ms(value: Any, what: str, *, allow_zero: bool = False) -> int:
    """A duration in whole milliseconds; a positive duration never rounds down to zero."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise _type_error(what, "seconds (int or float) or a timedelta", value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{what} must be finite, not {seconds}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{what} must be {'zero or ' if allow_zero else ''}positive, not {seconds}")
    ms = round(seconds * 1000.0)
    if ms == 0 and seconds > 0:
        ms = 1
    if ms > _U64_MAX:
        raise ValueError(f"{what} of {seconds} s is too long")
    return ms


def _mode(value: Any) -> Mode:
    if isinstance(value, Mode):
        return value
    if isinstance(value, str):
        normalized = value.strip().lower().replace("-", "_")
        for mode in Mode:
            if mode.name.lower() == normalized:
                return mode
        raise ValueError(f"mode must be 'multi-process' or 'single-process', not {value!r}")
    raise _type_error("mode", "a fencelock.Mode or str", value)


def _kind(shared: Any, permits: Any) -> tuple[LockKind, int]:
    """The kind an acquire asks for: exclusive, shared, or a permit of a semaphore."""
    if not isinstance(shared, bool):
        raise _type_error("shared", "bool", shared)
    if permits is None:
        return (LockKind.SHARED if shared else LockKind.EXCLUSIVE), 0
    if shared:
        raise ValueError("an acquire is shared or a permit of a semaphore, not both")
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise _type_error("permits", "int or None", permits)
    if not 0 < permits <= _ffi.MAX_HOLDERS:
        raise ValueError(f"permits must be 1 to {_ffi.MAX_HOLDERS}, not {permits}")
    return LockKind.SEMAPHORE, permits


def _names(value: Any) -> list[bytes]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise _type_error("names", "a list of str", value)
    names = [_name(name, "lock name") for name in value]
    if not names or len(names) > _ffi.MAX_HOLDERS:
        raise ValueError(f"names must hold 1 to {_ffi.MAX_HOLDERS} lock names, not {len(names)}")
    if len(set(names)) != len(names):
        raise ValueError("a lock name is given twice")
    return names


def _datetime(unix_ms: int) -> datetime:
    return datetime.fromtimestamp(unix_ms / 1000.0, tz=timezone.utc)


def _datetime_or_none(unix_ms: int) -> datetime | None:
    return _datetime(unix_ms) if unix_ms else None


def _lock_state(value: int) -> LockState:
    return LockState(value)


def _wait_ms(timeout: Any) -> int:
    """A wait for a lock: 0 tries once, None waits without a limit (the library saturates the
    longest timeout), a positive duration waits up to that long."""
    if timeout is None:
        return _FOREVER_MS
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout < 0:
        raise ValueError(
            f"timeout must be zero or positive, not {timeout}: timeout=None waits without a limit"
        )
    return _ms(timeout, "timeout", allow_zero=True)
