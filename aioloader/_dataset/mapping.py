"""`ds.map(f)`, `ds.random_map(f, seed=)`, `ds.map_with_index(f)` and `ds.filter(f)`: one
element in, one out.

A `None` (an element a filter dropped) stays `None` and the transform is not called,
as in Grain. An error in the transform reaches the caller with its own type and
traceback, and a note naming the transform and the element's index.

`filter` keeps an element by the truth value of the predicate's answer, as Grain does,
but a predicate that answers None (a forgotten `return`) is a TypeError. It leaves
`None` in place of the elements it rejects: the length does not
change and `ds[i]` answers for every index; iteration skips the holes, and `batch`
refuses to follow a filter (its batches would hold holes).

`random_map` gives the transform a generator made for that element alone: Philox
with the key Grain derives from the seed and the counter `[0, 0, 0, index]`, so the
draws equal Grain's and depend on nothing but the seed and the index (not on the
thread, nor on which elements were read before). The generator is made afresh for
every call, so nothing is shared between threads.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from aioloader._dataset.base import MapDataset, require_seed
from aioloader._dataset.functions import add_note, resolve
from aioloader._operations.apply import filter_verdict

T = TypeVar("T")


class ElementwiseMapDataset(MapDataset[T]):
    """One output per element of the parent, from the element and its index."""

    def __init__(self, parent: MapDataset[Any], kind: str, transform: Any) -> None:
        super().__init__(parent)
        self._parent, self._kind = parent, kind
        self._function, self._what = resolve(kind, transform)

    def __len__(self) -> int:
        return len(self._parent)

    @abc.abstractmethod
    def _call(self, element: Any, index: int) -> T | None:
        """The output for `element` (never `None`) at `index`."""

    def _apply(self, element: Any, index: int) -> T | None:
        if element is None:
            return None
        try:
            return self._call(element, index)
        except Exception as error:
            add_note(error, f"{self._kind}({self._what})", index)
            raise

    def _get(self, index: int) -> T | None:
        return self._apply(self._parent[index], index)

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        elements = self._parent._getitems(indices)
        return [self._apply(x, i) for x, i in zip(elements, indices, strict=True)]

    def __repr__(self) -> str:
        return f"{self._parent!r}.{self._kind}({self._what})"


class MapMapDataset(ElementwiseMapDataset[Any]):
    """`function(x)` for every element `x`."""

    def __init__(self, parent: MapDataset[Any], transform: Any) -> None:
        super().__init__(parent, "map", transform)

    def _call(self, element: Any, index: int) -> Any:
        return self._function(element)


class RandomMapMapDataset(ElementwiseMapDataset[Any]):
    """`function(x, rng)` for every element `x`, with `rng` made for its index."""

    def __init__(self, parent: MapDataset[Any], transform: Any, seed: int | None) -> None:
        super().__init__(parent, "random_map", transform)
        self._seed = require_seed(seed, self._default_seed, "random_map")
        self._new_rng = GrainRngs(self._seed)

    def _call(self, element: Any, index: int) -> Any:
        return self._function(element, self._new_rng(index))

    def __repr__(self) -> str:  # the seed too: a state's digest of the graph must see it
        return f"{self._parent!r}.random_map({self._what}, seed={self._seed})"


class MapWithIndexMapDataset(ElementwiseMapDataset[Any]):
    """`function(index, x)` for every element `x` at `index` (past `len(ds)` in later
    epochs, as in Grain: the index asked for, not the index within an epoch)."""

    def __init__(self, parent: MapDataset[Any], transform: Any) -> None:
        super().__init__(parent, "map_with_index", transform)

    def _call(self, element: Any, index: int) -> Any:
        return self._function(index, element)


class FilterMapDataset(ElementwiseMapDataset[T]):
    """The element where `predicate(element)` is true, else `None`."""

    def __init__(self, parent: MapDataset[T], transform: Any) -> None:
        super().__init__(parent, "filter", transform)
        self._label = f"filter({self._what})"  # made once, not per element

    def _call(self, element: T, index: int) -> T | None:
        return element if filter_verdict(self._function(element), self._label) else None


class GrainRngs:
    """`new_rng(index)`: Grain's generator for element `index` of a random map seeded `seed`.

    Grain seeds one Philox with `seed` (through numpy's SeedSequence) and, for each
    element, sets its counter to `[0, 0, 0, index]`; the same key and counter make the
    same stream here. `seed` is kept: a state names it (see `Operations.describe`).
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._key = np.random.Philox(seed).state["state"]["key"]

    def __call__(self, index: int) -> np.random.Generator:
        counter = np.array([0, 0, 0, index], dtype=np.uint64)
        return np.random.Generator(np.random.Philox(counter=counter, key=self._key))
