"""A transform's deep copy for a worker thread, with its large flat containers copied in C.

`copy.deepcopy` copies a dict or a list item by item in Python: a tokenizer's
20,000-word vocabulary took 10-20 ms (CPython 3.11 and 3.13t), once for each
worker, and once more before the first batch wherever the consumer's thread
runs chunks beside the workers (the pattern they copy, see
`Program.prepare_workers`). Yet `deepcopy` of a container whose items (and
keys) are all immutable scalars, of exactly the types it returns as they are,
is a new container of the same type holding the very same objects: what
`dict.copy()` makes in C, in about 1 ms. So before `deepcopy` runs, the
containers of that kind that the transform holds (in its attributes, and
theirs, a few levels down) get their copy in `deepcopy`'s memo, where it looks
first: the result is exactly `deepcopy`'s, containers shared between
transforms stay shared in the copy, and nothing else changes. A `__deepcopy__`
of the transform's own still decides for itself (returning `self` shares
everything, as before).
"""

from __future__ import annotations

import contextlib
import copy
import types
from typing import Any

# The scalars `deepcopy` returns as they are (exact types: a subclass of str may hold state).
SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes})
# Below this many items, copying in Python costs little; above, scanning the items' types
# (in C) costs a few percent of `deepcopy`'s walk when they turn out not to be scalars.
FLAT_MIN = 256
# How far down from the transform to look: its attributes' attributes' attributes (a
# tokenizer held by a transform, its vocabulary held by a dict of tables).
DEPTH = 3


def deep_copy(target: Any, memo: dict[int, Any]) -> Any:
    """`copy.deepcopy(target, memo)`, its large flat containers copied in C first."""
    with contextlib.suppress(Exception):  # only a shortcut: else `deepcopy` alone, its own error if any
        _prefill(target, memo, DEPTH)
    return copy.deepcopy(target, memo)


def _prefill(value: Any, memo: dict[int, Any], depth: int) -> None:
    for child in _children(value):
        if id(child) in memo:
            continue
        flat = _flat_copy(child)
        if flat is not None:
            memo[id(child)] = flat
            # The memo is by id: the original must outlive it, as `deepcopy` keeps its own
            # (in the list it holds under the memo's own id).
            memo.setdefault(id(memo), []).append(child)
        elif depth > 1:
            _prefill(child, memo, depth - 1)


def _children(value: Any) -> tuple[Any, ...]:
    """What `value` holds that may be (or hold) a large flat container: its attributes, or
    a small container's items (a large one that is not flat is not walked: too long)."""
    kind = type(value)
    if kind is dict:
        return tuple(value.values()) if len(value) < FLAT_MIN else ()
    if kind in (list, tuple):
        return tuple(value) if len(value) < FLAT_MIN else ()
    # Scalars hold nothing; classes are copied as they are, modules not at all. (`issubclass`
    # of the real type: `isinstance` would ask the object for `__class__`, which a proxy may refuse.)
    if kind in SCALARS or issubclass(kind, (type, types.ModuleType)) or not _copied_by_attributes(kind):
        return ()
    try:
        attributes = getattr(value, "__dict__", None)
    except Exception:  # a proxy whose referent is gone, say: `deepcopy` decides what that means
        return ()
    return tuple(attributes.values()) if type(attributes) is dict else ()


def _copied_by_attributes(kind: type) -> bool:
    """Whether `deepcopy` copies an instance of `kind` by copying its `__dict__`: no
    `__deepcopy__`, `__reduce_ex__`, `__reduce__` or `__getstate__` of its own. Only then are its
    attributes what `deepcopy` walks: one with a `__deepcopy__` may share them with the threads
    running it (a dict they change while a worker copies it), and is not walked."""
    return (
        getattr(kind, "__deepcopy__", None) is None
        and getattr(kind, "__reduce_ex__", None) is object.__reduce_ex__
        and getattr(kind, "__reduce__", None) is object.__reduce__
        and getattr(kind, "__getstate__", _GETSTATE) is _GETSTATE
    )


_GETSTATE = getattr(object, "__getstate__", None)  # object's own (3.11 on); None before


def _flat_copy(value: Any) -> Any | None:
    """`deepcopy(value)`, where `value` is a large dict, list, set or tuple of scalars (by
    exact type: for a subclass of dict, `deepcopy` makes what its `__reduce_ex__` says);
    else None."""
    kind = type(value)
    if kind not in (dict, list, set, tuple) or len(value) < FLAT_MIN:
        return None
    if not set(map(type, value)) <= SCALARS:
        return None
    if kind is dict and not set(map(type, value.values())) <= SCALARS:
        return None
    return value if kind is tuple else value.copy()  # `deepcopy` gives a tuple of the same items back
