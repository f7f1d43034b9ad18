"""Argument checks shared by the public constructors.

Each check raises at once with a message that names the parameter, says what
was expected and echoes the value, as Grain does. NumPy's ints and bools are
taken as Grain takes them (`Batch(np.int64(32))`), and stored as Python's.
"""

from __future__ import annotations

import operator
from typing import Any

from aioloader._common.failures import note


def require_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """`value` as a Python int, if it is an int (Python's or NumPy's, not a bool) of at
    least `minimum`."""
    if _is_bool(value):
        raise TypeError(f"`{name}` must be an int, got {value!r} of type {type(value).__name__}.")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"`{name}` must be an int, got {value!r} of type {type(value).__name__}.") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"`{name}` must be greater than or equal to {minimum}, got {number}.")
    return number


def require_bool(name: str, value: Any) -> bool:
    """`value` as a Python bool, if it is a bool (Python's or NumPy's)."""
    if not _is_bool(value):
        raise TypeError(f"`{name}` must be a bool, got {value!r} of type {type(value).__name__}.")
    return bool(value)


def int_field(owner: Any, name: str, *, minimum: int | None = None) -> None:
    """`require_int` on the (frozen) dataclass field `name` of `owner`, kept as a Python int."""
    object.__setattr__(owner, name, require_int(name, getattr(owner, name), minimum=minimum))


def bool_field(owner: Any, name: str) -> None:
    """`require_bool` on the (frozen) dataclass field `name` of `owner`, kept as a Python bool."""
    object.__setattr__(owner, name, require_bool(name, getattr(owner, name)))


def require_len(name: str, value: Any) -> int:
    """`len(value)`, or an error naming `name` when its `__len__` gives no length (a float,
    a negative number, one past `sys.maxsize`) or it has none."""
    try:
        return len(value)
    except (TypeError, ValueError, OverflowError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"`len({name})` must be an int from 0 to sys.maxsize, but: {error}.") from error
    except Exception as error:  # the `__len__`'s own error, as it is, with where it came from
        note(error, f"aioloader: raised by `len({name})`")
        raise


def _is_bool(value: Any) -> bool:
    """Python's bool, or NumPy's (recognised without importing NumPy)."""
    kind = type(value)
    return kind is bool or (kind.__name__ == "bool" and kind.__module__ == "numpy")
