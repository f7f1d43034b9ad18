"""`MapDataset.mix(datasets, weights)`, `MapDataset.concatenate(datasets)` and Grain's
`MapDataset.select_from_datasets(datasets, selection_map)`.

Each maps an index of the result to (which input, index in that input). Mixing uses
Grain's selection, so the order equals Grain's for the same weights: the weights are
scaled so that the smallest is 100 and cut to ints, then position `k` goes to the
input whose running share grows between `k` and `k + 1`. The mix is as long as the
shortest input allows (`len(input) / share`, the smallest of them).

Concatenation lays the inputs end to end; epoch `e` of the result is epoch `e` of
each input, in order; no inputs make an empty dataset, as in Grain.

`select_from_datasets` asks the user's selection map (Grain's `DatasetSelectionMap`:
`len(map)` and `map[index] -> (input, index in it)`) for every index, as it is given.
"""

from __future__ import annotations

import abc
import bisect
import itertools
import math
import numbers
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset

T = TypeVar("T")


class _SelectionMapDataset(MapDataset[T]):
    """Element `k` is element `j` of input `d`, where `(d, j) = self._select(k)`."""

    def __init__(self, datasets: Sequence[MapDataset[T]], *, allow_empty: bool = False) -> None:
        self._inputs = _require_datasets(datasets, allow_empty)
        super().__init__(self._inputs)

    @abc.abstractmethod
    def _select(self, index: int) -> tuple[int, int]:
        """(input, index in that input) of element `index`."""

    def _get(self, index: int) -> T | None:
        which, inner = self._select(index)
        return self._inputs[which][inner]

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        """One batched read per input; the results put back in the order of `indices`."""
        by_input: dict[int, tuple[list[int], list[int]]] = {}
        for slot, index in enumerate(indices):
            which, inner = self._select(index)
            slots, keys = by_input.setdefault(which, ([], []))
            slots.append(slot)
            keys.append(inner)
        results: list[T | None] = [None] * len(indices)
        for which, (slots, keys) in by_input.items():
            for slot, element in zip(slots, self._inputs[which]._getitems(keys), strict=True):
                results[slot] = element
        return results


class MixedMapDataset(_SelectionMapDataset[T]):
    """The inputs interleaved in proportion to `weights` (Grain's `MapDataset.mix`)."""

    def __init__(self, datasets: Sequence[MapDataset[T]], weights: Sequence[float] | None) -> None:
        super().__init__(datasets)
        shares = require_weights(weights, len(self._inputs))
        self._proportions = (1,) * len(shares) if weights is None else integer_proportions(shares)
        total = sum(self._proportions)
        empty = [i for i, d in enumerate(self._inputs) if len(d) == 0]
        if empty:  # Grain's words, which its users' tests match
            at = ", ".join(f"index {i} ({self._inputs[i]!r})" for i in empty)
            raise ValueError(
                f"All datasets must have positive length for mixing, but dataset(s) at {at} have length 0."
            )
        lengths = [len(d) / (p / total) for d, p in zip(self._inputs, self._proportions, strict=True)]
        self._length = min(sys.maxsize, int(min(lengths)))

    def __len__(self) -> int:
        return self._length

    def _select(self, index: int) -> tuple[int, int]:
        return select_by_proportions(index, self._proportions)

    def __repr__(self) -> str:
        return f"MapDataset.mix({list(self._inputs)!r}, proportions={list(self._proportions)})"


class ConcatenateMapDataset(_SelectionMapDataset[T]):
    """The inputs one after the other (Grain's `MapDataset.concatenate`)."""

    def __init__(self, datasets: Sequence[MapDataset[T]]) -> None:
        # No datasets make an empty dataset, as in Grain (a host given no files, say).
        super().__init__(datasets, allow_empty=True)
        self._sizes = [len(d) for d in self._inputs]
        forever = [i for i, size in enumerate(self._sizes) if size >= sys.maxsize]
        if forever:
            raise ValueError(f"`datasets` must be finite to concatenate; datasets {forever} repeat forever.")
        self._starts = list(itertools.accumulate(self._sizes, initial=0))
        if self._starts[-1] >= sys.maxsize:
            raise ValueError(f"`datasets` together hold {self._starts[-1]} elements, beyond sys.maxsize.")

    def __len__(self) -> int:
        return self._starts[-1]

    def _select(self, index: int) -> tuple[int, int]:
        epoch, offset = divmod(index, self._starts[-1])
        which = bisect.bisect_right(self._starts, offset) - 1
        return which, offset - self._starts[which] + epoch * self._sizes[which]

    def __repr__(self) -> str:
        return f"MapDataset.concatenate({list(self._inputs)!r})"


class DatasetSelectionMap(abc.ABC):
    """Grain's `grain.transforms.DatasetSelectionMap`: index -> (dataset, index in it).

    Subclass it (or give any object with the same two methods) to
    `MapDataset.select_from_datasets`. It must be stateless: the loader may ask
    for any index, from any thread, any number of times."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def __getitem__(self, index: int) -> tuple[int, int]: ...


class SelectFromDatasetsMapDataset(_SelectionMapDataset[T]):
    """Element `k` is the one `selection_map[k]` names (Grain's `select_from_datasets`)."""

    def __init__(self, datasets: Sequence[MapDataset[T]], selection_map: Any) -> None:
        super().__init__(datasets)
        if not (hasattr(selection_map, "__len__") and hasattr(selection_map, "__getitem__")):
            raise TypeError(
                "`selection_map` must have `__len__` and `__getitem__` (a DatasetSelectionMap), "
                f"got {selection_map!r:.200}."
            )
        self._map = selection_map
        self._length = require_int("len(selection_map)", len(selection_map), minimum=0)

    def __len__(self) -> int:
        return self._length

    def _select(self, index: int) -> tuple[int, int]:
        # The index as asked, negative or past the length too: as in Grain, the map decides.
        selected = self._map[index]
        try:
            which, inner = selected
        except (TypeError, ValueError):
            raise TypeError(
                f"`selection_map[{index}]` must be a pair (dataset, index), got {selected!r:.200}."
            ) from None
        which = require_int(f"selection_map[{index}][0]", which, minimum=0)
        if which >= len(self._inputs):
            raise IndexError(
                f"`selection_map[{index}]` selects dataset {which}, but there are {len(self._inputs)}."
            )
        return which, require_int(f"selection_map[{index}][1]", inner)

    def __repr__(self) -> str:  # the map by its type and length: a default repr holds an address
        selection = f"{type(self._map).__qualname__}(len={self._length})"
        return f"MapDataset.select_from_datasets({list(self._inputs)!r}, {selection})"


def integer_proportions(weights: Sequence[float]) -> tuple[int, ...]:
    """Grain's integer proportions: the weights scaled so that the smallest is 100, cut to ints."""
    scale = 100 / min(weights)
    return tuple(int(w * scale) for w in weights)


def select_by_proportions(index: int, proportions: tuple[int, ...]) -> tuple[int, int]:
    """(input, index in that input) of element `index` of an endless mix in `proportions`.

    Input `i` has given `floor(k * p_i / P)` of the first `k` elements, counted input by
    input on what the earlier inputs left; element `index` belongs to the input whose
    count grows from `index` to `index + 1`.
    """
    remaining = sum(proportions)
    before, after = index, index + 1
    for which, share in enumerate(proportions):
        rest_before = before * (remaining - share) // remaining
        rest_after = after * (remaining - share) // remaining
        if before - rest_before != after - rest_after:
            return which, after - rest_after - 1
        remaining -= share
        before, after = rest_before, rest_after
    raise AssertionError(f"no input selected for index {index} with proportions {proportions}")


def _require_datasets(datasets: Any, allow_empty: bool) -> tuple[MapDataset[Any], ...]:
    if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
        raise TypeError(f"`datasets` must be a list or tuple of MapDatasets, got {type(datasets).__name__}.")
    if not datasets and not allow_empty:
        raise ValueError("`datasets` must hold at least one MapDataset, got an empty sequence.")
    wrong = [i for i, d in enumerate(datasets) if not isinstance(d, MapDataset)]
    if wrong:
        raise TypeError(f"`datasets` must hold only MapDatasets; datasets {wrong} are not.")
    return tuple(datasets)


def require_weights(weights: Any, count: int) -> tuple[float, ...]:
    if weights is None:
        return (1.0,) * count
    if isinstance(weights, np.ndarray) and weights.ndim == 1:
        weights = weights.tolist()  # Grain takes an array of weights too
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"`weights` must be a sequence of numbers or None, got {weights!r}.")
    if len(weights) != count:
        raise ValueError(f"`weights` must have one weight per dataset ({count}), got {len(weights)}.")
    real = [isinstance(w, numbers.Real) and not isinstance(w, bool) for w in weights]
    values = [float(w) if ok else math.nan for w, ok in zip(weights, real, strict=True)]
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"`weights` must be finite numbers greater than 0, got {list(weights)!r}.")
    if not math.isfinite(max(values) * (100 / min(values))):  # as `integer_proportions` scales
        raise ValueError(f"`weights` must not span more than a float can hold, got {list(weights)!r}.")
    return tuple(values)
