"""Argument checks shared by the public constructors.

Each check raises at once with a message that names the parameter, says what
was expected and echoes the value, as Grain does.
"""

from __future__ import annotations

from typing import Any


def require_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return `value` if it is an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {value!r} of type {type(value).__name__}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"`{name}` must be greater than or equal to {minimum}, got {value}.")
    return value


def require_bool(name: str, value: Any) -> bool:
    """Return `value` if it is a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool, got {value!r} of type {type(value).__name__}.")
    return value
