"""`RebatchIterDataset(parent, batch_size, drop_remainder=False)`: the parent's batches cut
and joined into batches of `batch_size` rows (Grain's `grain.experimental.RebatchIterDataset`).

The parent's elements are batches: trees (dicts, lists, tuples, named tuples; None an
empty subtree) whose leaves are arrays sharing one leading dimension, the rows. The
rows are given in order, `batch_size` at a time, across the parent's batches; the last
batch, shorter, is kept unless `drop_remainder`. As in Grain, a leaf of an output made
of one parent batch is a slice of it (a view, for a numpy array), and one made of
several is `np.concatenate` of the pieces (numpy's dtype promotion, if the parent's
dtypes change). Dicts come out with their keys sorted, as `jax.tree_util` (which Grain
uses) orders them; an OrderedDict keeps its order, a defaultdict its default factory.
The rebatch runs in the consumer's iterator; the parent may be a MapDataset, read as
`to_iter_dataset()`; `parents` keeps it as given.

A parent batch of 0 rows is a ValueError with Grain's message. Unlike Grain, which
checks only the first leaf and keeps the first batch's tree, a batch whose leaves have
different numbers of rows, or whose tree differs from the first batch's, is a
ValueError naming the leaf or the batch (Grain gives misaligned rows, relabels the
leaves, or fails with an IndexError, depending on the case); a leaf without a leading
dimension (a scalar) is a TypeError.

The state is the parent's state before the batch being cut and how many of its rows
were given (Grain's); resuming reads that batch again and skips them. Once a batch's
last row is given, the state is the parent's after it. As in Grain, a state resumes in
a rebatch with another `batch_size` or `drop_remainder` too. One more difference:
`batch_size` must be an int and `drop_remainder` a bool (Grain takes any number and
any truthy value), else an error naming them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any, NamedTuple, TypeVar

import numpy as np

from aioloader._common.validation import require_bool, require_int
from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, require_count, state_fields

T = TypeVar("T")

# A tree's shape without its leaves (compared between batches, so hashable and plain):
# "leaf", "none", or (kind, keys or a named tuple's class, children).
Spec = Any
_LEAF, _NONE = "leaf", "none"


class RebatchIterDataset(IterDataset[Any]):
    """The rows of `parent`'s batches, in batches of `batch_size`."""

    def __init__(
        self, parent: IterDataset[Any] | MapDataset[Any], batch_size: int, drop_remainder: bool = False
    ) -> None:
        super().__init__(parent)
        self._parent: IterDataset[Any] = require_iter_dataset("parent", parent)
        self._batch_size = require_int("batch_size", batch_size, minimum=1)
        self._drop_remainder = require_bool("drop_remainder", drop_remainder)

    def _plan(self, settings: Settings) -> Plan:
        parent = as_stage(self._parent._plan(settings))
        return RebatchStage(parent, self._batch_size, self._drop_remainder)

    def __repr__(self) -> str:
        return (
            f"RebatchIterDataset({self._parent!r}, batch_size={self._batch_size}, "
            f"drop_remainder={self._drop_remainder})"
        )


class ParentBatch(NamedTuple):
    """One parent batch, flattened: its leaves, and the rows each has."""

    leaves: list[Any]
    rows: int


class RebatchStage(Stage[Any]):
    """The rebatch running in order (see the module docstring for its state)."""

    def __init__(self, parent: Stage[Any], batch_size: int, drop_remainder: bool) -> None:
        super().__init__((parent,))
        self._parent, self._batch_size, self._drop_remainder = parent, batch_size, drop_remainder
        self._current: ParentBatch | None = None  # the parent batch being cut
        self._given = 0  # its rows given
        self._start: Any = None  # the parent's snapshot before it
        self._spec: Spec | None = None  # the first batch's tree, which every batch must have
        self._taken = 0  # the parent's batches taken, for error messages
        self._resumed = False  # then `_taken` counts from the state, not from the start

    def __next__(self) -> Any:
        pieces: list[list[Any]] = []  # per leaf, the slices of this output, in order
        needed = self._batch_size
        while needed:
            if (self._current is None or self._given == self._current.rows) and not self._load():
                break  # the parent ended
            assert self._current is not None
            take = min(needed, self._current.rows - self._given)
            cut = slice(self._given, self._given + take)
            if not pieces:
                pieces = [[] for _ in self._current.leaves]
            for leaf_pieces, leaf in zip(pieces, self._current.leaves, strict=True):
                leaf_pieces.append(leaf[cut])
            self._given += take
            needed -= take
        if not pieces or (needed and self._drop_remainder):
            raise StopIteration
        return _unflatten(self._spec, iter([_join(leaf_pieces) for leaf_pieces in pieces]))

    def _load(self) -> bool:
        """Take the parent's next batch as the current one; False at the parent's end."""
        start = self._parent.snapshot()
        try:
            element = next(self._parent)
        except StopIteration:
            return False
        self._taken += 1
        batch = self._flatten(element)
        # Set together, once the batch is checked: a bad batch leaves no half state.
        self._start, self._current, self._given = start, batch, 0
        return True

    def _flatten(self, element: Any) -> ParentBatch:
        """`element` flattened and checked: the first batch's tree, rows in every leaf."""
        which = f"the parent's batch {self._taken - 1}" + (" after the state" if self._resumed else "")
        leaves: list[Any] = []
        spec = _flatten(element, leaves)
        if self._spec is None:
            self._spec = spec
        elif spec != self._spec:
            raise ValueError(
                f"RebatchIterDataset: {which} has another tree than the first batch it cut: "
                f"{_describe(spec)} instead of {_describe(self._spec)}."
            )
        return ParentBatch(leaves, _rows(leaves, spec, which))

    def snapshot(self) -> tuple[Any, int]:
        if self._current is not None and self._given < self._current.rows:
            return self._start, self._given
        return self._parent.snapshot(), 0  # between batches: resume after the last one

    def state_of(self, token: tuple[Any, int]) -> dict[str, Any]:
        start, given = token
        return {"stage": "rebatch", "parent": self._parent.state_of(start), "given": given}

    def set_state(self, state: dict[str, Any]) -> None:
        parent, given = state_fields(state, "rebatch", ("parent", "given"))
        given = require_count("given", given)
        self._parent.set_state(parent)
        self._resumed = True
        if given:
            self._resume_within(given)

    def _resume_within(self, given: int) -> None:
        """Take the batch the state stopped in again, and skip its `given` rows."""
        if not self._load():
            raise ValueError(
                f"`state` says {given} rows of a batch were given, but the parent has no batch "
                "there: it is a state of another pipeline."
            )
        assert self._current is not None
        if given >= self._current.rows:
            raise ValueError(
                f"`state` says {given} rows of a batch were given, but it has {self._current.rows} "
                "rows: it is a state of another pipeline."
            )
        self._given = given


def _join(pieces: list[Any]) -> Any:
    """A leaf's pieces as one: the slice itself when there is one, as in Grain."""
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=0)


def _rows(leaves: list[Any], spec: Spec, which: str) -> int:
    """The rows every leaf of a batch has (at least 1), or an error naming the leaf."""
    if not leaves:
        raise ValueError(f"RebatchIterDataset: {which} has no arrays to rebatch: {_describe(spec)}.")
    counts = [_leading(leaf, spec, index, which) for index, leaf in enumerate(leaves)]
    if counts[0] == 0:
        raise ValueError("Rebatching with starting batch size of 0 is not supported.")  # Grain's words
    for index, count in enumerate(counts):
        if count != counts[0]:
            paths = _paths(spec)
            raise ValueError(
                f"RebatchIterDataset: the leaves of {which} have different numbers of rows: "
                f"{paths[index]} has {count}, {paths[0]} has {counts[0]}."
            )
    return counts[0]


def _leading(leaf: Any, spec: Spec, index: int, which: str) -> int:
    """The leaf's leading dimension, or a TypeError naming it."""
    try:
        return len(leaf)
    except TypeError:
        raise TypeError(
            f"RebatchIterDataset: {_paths(spec)[index]} of {which} has no leading dimension to "
            f"rebatch along: {leaf!r:.100} of type {type(leaf).__name__} (the parent must give batches)."
        ) from None


def _flatten(tree: Any, leaves: list[Any]) -> Spec:
    """The spec of `tree`, its leaves appended to `leaves` in `jax.tree_util`'s order."""
    if tree is None:
        return _NONE
    if isinstance(tree, dict):
        keys = _keys(tree)
        children = tuple(_flatten(tree[key], leaves) for key in keys)
        return _dict_kind(tree), keys, children
    if isinstance(tree, (list, tuple)):
        kind: Any = type(tree) if hasattr(tree, "_fields") else (list if isinstance(tree, list) else tuple)
        return kind, None, tuple(_flatten(child, leaves) for child in tree)
    leaves.append(tree)
    return _LEAF


def _keys(mapping: dict[Any, Any]) -> tuple[Any, ...]:
    """A dict's keys in `jax.tree_util`'s order: sorted, but an OrderedDict's as they are
    (and a dict's of keys that do not sort, as aioloader's batch keeps them)."""
    if isinstance(mapping, collections.OrderedDict):
        return tuple(mapping)
    try:
        return tuple(sorted(mapping))
    except TypeError:
        return tuple(mapping)


def _dict_kind(mapping: dict[Any, Any]) -> Any:
    """What rebuilds a dict: OrderedDict, a defaultdict's factory, or dict."""
    if isinstance(mapping, collections.OrderedDict):
        return collections.OrderedDict
    if isinstance(mapping, collections.defaultdict):
        return ("defaultdict", mapping.default_factory)
    return dict


def _unflatten(spec: Spec, leaves: Iterator[Any]) -> Any:
    """The tree of `spec` with `leaves` in its places."""
    if spec == _LEAF:
        return next(leaves)
    if spec == _NONE:
        return None
    kind, keys, children = spec
    values = [_unflatten(child, leaves) for child in children]
    if keys is None:
        return kind(*values) if hasattr(kind, "_fields") else kind(values)
    if isinstance(kind, tuple):  # a defaultdict, with its factory
        return collections.defaultdict(kind[1], zip(keys, values, strict=True))
    return kind(zip(keys, values, strict=True))


def _paths(spec: Spec, path: str = "") -> list[str]:
    """Where each leaf of `spec` is, in order, for errors: `leaf ['a'][0]`."""
    if spec == _LEAF:
        return [f"leaf {path}" if path else "the batch itself"]
    if spec == _NONE:
        return []
    _, keys, children = spec
    names = [repr(key) for key in keys] if keys is not None else [str(i) for i in range(len(children))]
    pairs = zip(names, children, strict=True)
    return [where for name, child in pairs for where in _paths(child, f"{path}[{name}]")]


def _describe(spec: Spec) -> str:
    """A spec as a short text for errors: `{'a': *, 'b': (*, None)}`."""
    if spec == _LEAF:
        return "*"
    if spec == _NONE:
        return "None"
    kind, keys, children = spec
    parts = [_describe(child) for child in children]
    if keys is not None:
        return "{" + ", ".join(f"{key!r}: {part}" for key, part in zip(keys, parts, strict=True)) + "}"
    inner = ", ".join(parts)
    if kind is list:
        return f"[{inner}]"
    name = "" if kind is tuple else kind.__name__
    return f"{name}({inner}{',' if len(parts) == 1 and kind is tuple else ''})"
