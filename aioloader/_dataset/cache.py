"""`CacheIterDataset(parent)`: the parent's elements, kept in memory once read to the end
(Grain's `grain.experimental.CacheIterDataset`).

The first run that reads the parent from its start to its end keeps every element; from
then on a run of the dataset gives the kept elements, in order, without running the
parent at all. So a `RepeatIterDataset` after the cache reads the parent once, whatever
the number of epochs (as in Grain), and a `set_state` back to an earlier state, once the
cache is full, reads nothing again. The elements kept are the very objects the parent
gave, given again as they are (as in Grain): a transformation after the cache must not
change them in place. The parent must be finite and fit in memory.

The state is the position (elements given) and, while the parent runs, the parent's
state (None once the elements come from the cache). As in Grain, a fresh run given a
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
    """The elements of a full read of the parent, once a run has made one (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._elements: tuple[Any, ...] | None = None

    def elements(self) -> tuple[Any, ...] | None:
        with self._lock:
            return self._elements

    def keep(self, elements: list[Any]) -> None:
        """Keep `elements` unless another run kept its own first (they are equal)."""
        with self._lock:
            if self._elements is None:
                self._elements = tuple(elements)


class CacheStage(Stage[Any]):
    """The cache running: from the kept elements if they are there, else from a run of the
    parent, keeping what it gives when it has read it from the start."""

    def __init__(self, fresh_run: Callable[[], Stage[Any]], kept: Kept) -> None:
        self._fresh_run, self._kept = fresh_run, kept
        self._elements = kept.elements()
        self._parent: Stage[Any] | None = None if self._elements is not None else fresh_run()
        super().__init__(() if self._parent is None else (self._parent,))
        self._position = 0  # elements given
        self._keeping: list[Any] | None = []  # what the parent gave, while it is read from its start
        self._refill = 0  # elements to read again from a fresh parent before the next (see set_state)
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
        if self._refill:
            self._read_again()
        try:
            element = next(self._parent)
        except StopIteration:
            self._ended = True
            # A parent cut short by `close` ends early: what it gave is not all of it.
            if self._keeping is not None and not self._closed:
                self._kept.keep(self._keeping)
            raise
        if self._keeping is not None:
            self._keeping.append(element)
        return element

    def _read_again(self) -> None:
        """Read the first `_refill` elements from the parent's start again, keeping them."""
        assert self._parent is not None
        count, self._refill = self._refill, 0
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

    def snapshot(self) -> tuple[int, Any]:
        if self._parent is None:
            return self._position, None
        return self._position, self._parent.snapshot()

    def state_of(self, token: tuple[int, Any]) -> dict[str, Any]:
        position, parent = token
        parent_state = None if self._parent is None else self._parent.state_of(parent)
        return {"stage": "cache", "position": position, "parent": parent_state}

    def set_state(self, state: dict[str, Any]) -> None:
        position, parent = state_fields(state, "cache", ("position", "parent"))
        self._position = require_count("position", position)
        if parent is not None:
            self._check_parent(parent)
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
