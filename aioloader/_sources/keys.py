"""Record keys over consecutive storage blocks (files, chunks, row groups), and reads grouped by block.

Storage formats keep records in blocks that are read or decoded whole. A key
maps to (block, offset within the block); a batch of keys is read with one
call per distinct block, and the results are put back in key order.
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


class KeyIndex:
    """Keys `[0, total)` laid over blocks of `counts[b]` records each, in order.

    Immutable, so safe to share between threads. When every block but the
    last holds the same number of records (the usual layout), a lookup is a
    division; otherwise it is a binary search.
    """

    def __init__(self, counts: Sequence[int] | np.ndarray) -> None:
        self.counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        self.starts = np.concatenate(([0], np.cumsum(self.counts))).astype(np.int64)
        self.total = int(self.starts[-1])
        first = int(self.counts[0]) if len(self.counts) else 0
        uniform = first > 0 and bool(np.all(self.counts[:-1] == first) and self.counts[-1] <= first)
        self._stride = first if uniform else 0
        self._ends: list[int] = [] if uniform else self.starts[1:].tolist()

    def __len__(self) -> int:
        return len(self.counts)

    def locate(self, key: Any) -> tuple[int, int]:
        """(block, offset in that block) of `key`; IndexError outside `[0, total)`."""
        index = require_key(key, self.total)
        if self._stride:
            return divmod(index, self._stride)
        block = bisect_right(self._ends, index)
        return block, index - int(self.starts[block])

    def locate_many(self, keys: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Blocks and offsets of `keys`, as two int64 arrays (checked as `locate` checks one key)."""
        array = np.asarray(keys).reshape(-1)
        if array.dtype.kind not in "iu":
            # Not `astype(int64)`: it would truncate 1.6 to record 1 and parse "3" as record 3,
            # reading the wrong records without a word. Each key as `locate` takes it instead.
            array = np.array([require_key(key, self.total) for key in array.tolist()], dtype=np.int64)
        elif len(array) and (array.min() < 0 or array.max() >= self.total):
            bad = array[(array < 0) | (array >= self.total)][0]
            raise IndexError(f"`keys` must be in [0, {self.total}), got {int(bad)}.")
        array = array.astype(np.int64, copy=False)
        if self._stride:
            return array // self._stride, array % self._stride
        blocks = np.searchsorted(self.starts, array, side="right") - 1
        return blocks, array - self.starts[blocks]


def distinct(blocks: np.ndarray) -> list[int]:
    """The distinct values of `blocks` (ints), ascending: what `np.unique(blocks).tolist()` gives,
    without its first call's import of numpy.ma (~25 ms, paid before a loader's first batch)."""
    return sorted(set(blocks.tolist()))


def require_key(key: Any, total: int) -> int:
    """`key` as an int in `[0, total)`, else IndexError (TypeError if it is not an integer;
    a bool is not one here, though `operator.index` takes it: `True` is no record key).

    Without NumPy: sources read in a subinterpreter (SQLite's) call it, where NumPy
    cannot load."""
    if isinstance(key, bool):  # a NumPy bool needs no check: `operator.index` refuses it
        raise TypeError(f"`key` must be an integer, got the bool {key!r}.")
    try:
        index = operator.index(key)
    except TypeError:
        raise TypeError(f"`key` must be an integer, got {key!r} of type {type(key).__name__}.") from None
    if not 0 <= index < total:
        raise IndexError(f"`key` must be in [0, {total}), got {index}.")
    return index


def read_grouped(
    blocks: np.ndarray, offsets: np.ndarray, read: Callable[[int, list[int]], list[T]]
) -> list[T]:
    """`read(block, offsets)` once per distinct block; the results in the order of the inputs."""
    if not len(blocks):
        return []
    if blocks[0] == blocks[-1] and bool(np.all(blocks == blocks[0])):
        return read(int(blocks[0]), offsets.tolist())
    order = np.argsort(blocks, kind="stable")
    cuts = np.flatnonzero(np.diff(blocks[order])) + 1
    if len(cuts) == len(blocks) - 1:  # a block per key (one record per chunk): nothing to group
        return [
            read(block, [offset])[0] for block, offset in zip(blocks.tolist(), offsets.tolist(), strict=True)
        ]
    results: list[Any] = [None] * len(blocks)
    for group in np.split(order, cuts):
        slots = group.tolist()
        for slot, value in zip(slots, read(int(blocks[slots[0]]), offsets[group].tolist()), strict=True):
            results[slot] = value
    return results
