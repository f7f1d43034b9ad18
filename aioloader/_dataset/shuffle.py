"""`ds.shuffle(seed=)`: a global shuffle of every epoch, Grain's order.

Element `i` of epoch `e` is the parent's element `index_shuffle(i)` of epoch `e`,
where `index_shuffle` is Grain's keyed permutation of `[0, len)` with the seed
`(seed + e) mod 2**32` and 4 rounds: the same order as Grain's `MapDataset.shuffle`,
different in every epoch, computed per index in O(1) memory, never materialised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from aioloader._dataset.base import MapDataset, require_shuffle_seed
from aioloader._sampling.index_shuffle import index_shuffle, index_shuffle_array

T = TypeVar("T")

_SEEDS = 2**32
_ROUNDS = 4


class ShuffleMapDataset(MapDataset[T]):
    """The parent's elements of each epoch in the order `index_shuffle` keys by the seed."""

    def __init__(self, parent: MapDataset[T], seed: int | None) -> None:
        super().__init__(parent)
        self._parent, self._length = parent, len(parent)
        self._seed = require_shuffle_seed(seed, self._default_seed, "shuffle")

    def __len__(self) -> int:
        return self._length

    def _parent_index(self, index: int) -> int:
        epoch, offset = divmod(index, self._length)
        shuffled = index_shuffle(offset, self._length - 1, (self._seed + epoch) % _SEEDS, _ROUNDS)
        return shuffled + epoch * self._length

    def _get(self, index: int) -> T | None:
        return self._parent[self._parent_index(index)]

    def _getitems(self, indices: Sequence[int]) -> list[T | None]:
        """The parent's elements for `indices`, shuffled one array per epoch they span."""
        if not indices:
            return []
        epochs, offsets = np.divmod(np.asarray(indices, dtype=np.int64), self._length)
        parents = np.empty_like(offsets)
        for epoch in np.unique(epochs).tolist():
            at = epochs == epoch
            seed = (self._seed + epoch) % _SEEDS
            parents[at] = index_shuffle_array(offsets[at], self._length - 1, seed, _ROUNDS)
            parents[at] += epoch * self._length
        return self._parent._getitems(parents.tolist())

    def __repr__(self) -> str:
        return f"{self._parent!r}.shuffle(seed={self._seed})"
