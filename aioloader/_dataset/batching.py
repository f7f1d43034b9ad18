"""`ds.batch(batch_size, drop_remainder=, batch_fn=)`: consecutive elements, stacked.

Batch `b` of epoch `e` holds the parent's elements `b * batch_size` up to the end of
the parent's epoch `e`, so a batch never spans two epochs (Grain's rule). Elements
are stacked leaf by leaf through dicts, tuples and lists, as Grain stacks them, unless
`batch_fn(list_of_elements)` is given.

`batch_and_pad` is Grain's `grain.experimental.batch_and_pad`, a `batch_fn` that pads a
short last batch to the full size (with `functools.partial(batch_and_pad,
batch_size=n)`), so that every batch has one shape without dropping the remainder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from aioloader._common.failures import note
from aioloader._common.validation import require_int
from aioloader._dataset.base import MapDataset, graph
from aioloader._dataset.flat_mapping import FlatMapMapDataset
from aioloader._dataset.functions import add_note
from aioloader._dataset.mapping import FilterMapDataset
from aioloader._operations.batching import stack
from aioloader._operations.transforms import Batch


class BatchMapDataset(MapDataset[Any]):
    """Batches of `batch_size` consecutive elements of the parent."""

    def __init__(
        self,
        parent: MapDataset[Any],
        batch_size: int,
        drop_remainder: bool,
        batch_fn: Callable[[list[Any]], Any] | None,
    ) -> None:
        super().__init__(parent)
        batch = Batch(batch_size, drop_remainder, batch_fn)  # its checks of the three
        self._size, self._drop = batch.batch_size, batch.drop_remainder
        _refuse_holes(parent)
        self._parent, self._parent_length = parent, len(parent)
        self._combine: Callable[[list[Any]], Any] = batch_fn or stack
        whole = self._parent_length // self._size
        self._length = whole if self._drop else math.ceil(self._parent_length / self._size)

    def __len__(self) -> int:
        return self._length

    def _bounds(self, index: int) -> range:
        epoch, batch = divmod(index, self._length)
        offset = epoch * self._parent_length
        start = batch * self._size
        return range(offset + start, offset + min(self._parent_length, start + self._size))

    def _get(self, index: int) -> Any:
        bounds = self._bounds(index)
        elements = self._parent._getitems(bounds)
        try:
            return self._combine(elements)
        except Exception as error:
            add_note(error, f"batch({self._size})", index)
            note(error, f"(elements {bounds.start}..{bounds.stop - 1} of the parent)")
            raise

    def _getitems(self, indices: Sequence[int]) -> list[Any]:
        return [self._get(i) for i in indices]

    def __repr__(self) -> str:
        return f"{self._parent!r}.batch({self._size}, drop_remainder={self._drop})"


def _refuse_holes(parent: MapDataset[Any]) -> None:
    """Grain's rule: no batch after a filter or a flat map upstream, whose `None` holes
    would be batched (Grain refuses both when the batch is made)."""
    for node in graph(parent):
        if isinstance(node, FilterMapDataset):
            # The first words are Grain's, which its users' tests may match.
            raise ValueError(
                f"`MapDataset.batch` can not follow `MapDataset.filter` ({node!r}): a filter leaves "
                "None holes. Batch before the filter, or batch an IterDataset made from it."
            )
        if isinstance(node, FlatMapMapDataset):
            raise ValueError(
                f"`MapDataset.batch` can not follow `FlatMapMapDataset` ({node!r}): its unused slots "
                "are None holes. Batch an IterDataset made from it (`to_iter_dataset()`)."
            )


def batch_and_pad(values: Sequence[Any], *, batch_size: int, pad_value: Any = 0) -> Any:
    """`values` stacked as `Batch` stacks them, each leaf then padded with `pad_value` (in
    the leaf's dtype) up to `batch_size` rows."""
    require_int("batch_size", batch_size, minimum=1)
    if not values:
        raise ValueError("`batch_and_pad` cannot batch 0 values.")
    if len(values) > batch_size:
        raise ValueError(f"`batch_and_pad` cannot batch {len(values)} values to batch_size={batch_size}.")
    return _padded(stack(values), batch_size - len(values), pad_value)


def _padded(batch: Any, count: int, pad_value: Any) -> Any:
    """Each leaf of `batch` (as `stack` makes them) with `count` rows of `pad_value` after it."""
    if count == 0 or batch is None:
        return batch
    if isinstance(batch, dict):
        return {key: _padded(leaf, count, pad_value) for key, leaf in batch.items()}
    if isinstance(batch, list):
        return [_padded(leaf, count, pad_value) for leaf in batch]
    if isinstance(batch, tuple):
        leaves = [_padded(leaf, count, pad_value) for leaf in batch]
        return type(batch)(*leaves) if hasattr(batch, "_fields") else tuple(leaves)
    padding = np.full((count, *batch.shape[1:]), pad_value, dtype=batch.dtype)
    return np.concatenate([batch, padding])
