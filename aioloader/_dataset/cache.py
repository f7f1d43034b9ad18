"""`CacheIterDataset(parent)`: the parent's elements, kept in memory once read to the end
(Grain's `grain.experimental.CacheIterDataset`).

The first run that reads the parent from its start to its end keeps every element; from
then on a run of the dataset gives the kept elements, in order, without running the
parent at all. So a `RepeatIterDataset` after the cache reads the parent once, whatever
the number of epochs (as in Grain), and a `set_state` back to an earlier state, once the
cache is full, reads nothing again. The elements kept are the very objects the parent
gave, given again as they are (as in Grain): a transformation after the cache must not
change them in place. The parent must be finite and fit in memory.

The state is the position (elements given) and the parent's state: where the parent
stands while it is read; while the elements come from the cache, the parent's state at
its end, or the one `set_state` gave. So, as in Grain, a state always has one shape, and
`get_state()` right after `set_state(s)` is `s` again. As in Grain, a fresh run given a
state at position `n` while the cache is not full reads the parent again from its start,
keeping its first `n` elements, so that the cache is full at its end; a state whose
parent ended before `n` elements is a ValueError. The parent's state in it is checked
by a fresh run of the parent (a state of another pipeline is a ValueError).

Deliberate difference from Grain: the cache belongs to the dataset, not to one
iterator. In aioloader each epoch of a repeat, and each `set_state`, runs a freshly
compiled pipeline, so a cache kept by one run would never be read again; kept by the
dataset, it serves them all. A second `iter(ds)` thus reads the cache too (Grain's reads
the parent again), and the cache lives as long as the dataset does.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from aioloader._dataset.base import MapDataset
from aioloader._dataset.iter_base import IterDataset, require_iter_dataset
from aioloader._dataset.stages import Plan, Settings, Stage, as_stage, require_count, state_fields

T = TypeVar("T")


class CacheIterDataset(IterDataset[T]):
    """The elements of `parent`, kept in memory by the first run that reads them all."""

    def __init__(self, parent: IterDataset[T] | MapDataset[T]) -> None:
        super().__init__(parent)
        self._parent: IterDataset[T] = require_iter_dataset("parent", parent)
        self._kept = Kept()

    def _plan(self, settings: Settings) -> Plan:
        def fresh_run() -> Stage[Any]:
            return as_stage(self._parent._plan(settings))

        return CacheStage(fresh_run, self._kept)

    def __repr__(self) -> str:
        return f"CacheIterDataset({self._parent!r})"


class Kept:
    """The elements of a full read of the parent, and the parent's state at its end, once
    a run has made one (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._elements: tuple[Any, ...] | None = None
        self._end: dict[str, Any] | None = None

    def elements(self) -> tuple[tuple[Any, ...], dict[str, Any] | None] | None:
        """The elements and the parent's state at its end; None before a full read."""
        with self._lock:
            return None if self._elements is None else (self._elements, self._end)

    def keep(self, elements: list[Any], end: dict[str, Any]) -> None:
        """Keep `elements` unless another run kept its own first (they are equal)."""
        with self._lock:
            if self._elements is None:
                self._elements, self._end = tuple(elements), end


class CacheStage(Stage[Any]):
    """The cache running: from the kept elements if they are there, else from a run of the
    parent, keeping what it gives when it has read it from the start."""

    def __init__(self, fresh_run: Callable[[], Stage[Any]], kept: Kept) -> None:
        self._fresh_run, self._kept = fresh_run, kept
        found = kept.elements()
        self._elements: tuple[Any, ...] | None = None if found is None else found[0]
        # The parent's state while it is not read: at its end, or as `set_state` gave it.
        self._recorded: dict[str, Any] | None = None if found is None else found[1]
        self._parent: Stage[Any] | None = None if self._elements is not None else fresh_run()
        super().__init__(() if self._parent is None else (self._parent,))
        self._position = 0  # elements given
        self._keeping: list[Any] | None = []  # what the parent gave, while it is read from its start
        # Elements to read again from a fresh parent before the next (see set_state); None
        # once the parent is being read.
        self._refill: int | None = None
        self._ended = False
        self._closed = False

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self._elements is not None:
            if self._position >= len(self._elements):
                raise StopIteration
            element = self._elements[self._position]
        else:
            element = self._from_parent()
        self._position += 1
        return element

    def _from_parent(self) -> Any:
        assert self._parent is not None
        if self._ended:
            raise StopIteration
        if self._refill is not None:
            self._read_again()
        try:
            element = next(self._parent)
        except StopIteration:
            self._ended = True
            # A parent cut short by `close` ends early: what it gave is not all of it.
            if self._keeping is not None and not self._closed:
                self._kept.keep(self._keeping, self._parent.get_state())
            raise
        if self._keeping is not None:
            self._keeping.append(element)
        return element

    def _read_again(self) -> None:
        """Read the first `_refill` elements from the parent's start again, keeping them."""
        assert self._parent is not None
        assert self._refill is not None
        count, self._refill = self._refill, None
        self._keeping = []
        for _ in range(count):
            try:
                self._keeping.append(next(self._parent))
            except StopIteration:
                self._ended = True
                raise ValueError(
                    f"`state` is at position {count}, but the cache's parent ended after "
                    f"{len(self._keeping)} elements: it is not the state of this pipeline."
                ) from None

    def snapshot(self) -> tuple[int, bool, Any]:
        """The position, whether the parent is being read, and then its token, else the
        parent's state as recorded (at its end, or as `set_state` gave it)."""
        if self._parent is None or self._refill is not None:
            return self._position, False, self._recorded
        return self._position, True, self._parent.snapshot()

    def state_of(self, token: tuple[int, bool, Any]) -> dict[str, Any]:
        position, reading, parent = token
        if reading:
            assert self._parent is not None
            parent = self._parent.state_of(parent)
        return {"stage": "cache", "position": position, "parent": parent}

    def set_state(self, state: dict[str, Any]) -> None:
        position, parent = state_fields(state, "cache", ("position", "parent"))
        self._position = require_count("position", position)
        if parent is not None:
            self._check_parent(parent)
        # Reported until the parent is read again: `get_state()` gives `state` back.
        self._recorded = copy.deepcopy(parent)
        if self._elements is not None:
            if self._position > len(self._elements):
                raise ValueError(
                    f"`state` is at position {position}, but the cache holds {len(self._elements)} elements."
                )
            return
        # Like Grain: read the first `position` elements again (at the next `next()`), so
        # that this run keeps them all and fills the cache at its end.
        self._refill = self._position

    def _check_parent(self, parent: dict[str, Any]) -> None:
        """A state of another pipeline is refused by the parent (a fresh run of it, which is
        then closed: this stage reads its parent from the start)."""
        check = self._parent or self._fresh_run()
        try:
            check.set_state(parent)
        finally:
            if check is not self._parent:
                check.close()
        if self._parent is not None:  # resumed, it is no longer at its start: read a fresh one
            self._parent.close()
            self._parent = self._fresh_run()
            self.parents = (self._parent,)

    def close(self) -> None:
        self._closed = True  # before the parent's close, which may end its `next()` early
        if self._parent is not None:
            self._parent.close()
