"""`ds.apply(transformations)`: Grain's transform objects turned into dataset methods.

Each transformation (aioloader's class or Grain's, told apart by `is_grain`) becomes the
method that takes it: a `Batch` becomes `ds.batch(...)` with its fields, a map
`ds.map(...)`, a random map `ds.random_map(...)`, a map with index
`ds.map_with_index(...)`, a filter `ds.filter(...)`, a flat map a `FlatMapMapDataset` or
`FlatMapIterDataset` (Grain's `experimental` classes). The same dispatch as Grain's
`apply_transformations`, for MapDatasets and IterDatasets alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from aioloader._dataset.functions import KINDS
from aioloader._operations.transforms import FlatMapTransform, is_grain, own_batch

D = TypeVar("D")  # a MapDataset or an IterDataset: the result is of the same kind


def apply_transformations(ds: D, transformations: Any) -> D:
    """`ds` with `transformations` (one, or a sequence of them) applied in order."""
    if isinstance(transformations, (str, bytes)) or not isinstance(transformations, Sequence):
        transformations = (transformations,)
    for transformation in transformations:
        ds = _apply_one(ds, transformation)
    return ds


def _apply_one(ds: Any, transformation: Any) -> Any:
    batch = own_batch(transformation)
    if batch is not None:
        return ds.batch(batch.batch_size, drop_remainder=batch.drop_remainder, batch_fn=batch.batch_fn)
    for base, grain_name, method in KINDS.values():  # the dataset methods and what each takes
        if isinstance(transformation, base) or is_grain(transformation, grain_name):
            return getattr(ds, method)(transformation)
    if isinstance(transformation, FlatMapTransform) or is_grain(transformation, "FlatMap"):
        from aioloader._dataset.base import MapDataset  # both import the package's dataset modules
        from aioloader._dataset.flat_mapping import FlatMapIterDataset, FlatMapMapDataset

        if isinstance(ds, MapDataset):
            return FlatMapMapDataset(ds, transformation)
        return FlatMapIterDataset(ds, transformation)
    raise NotImplementedError(
        f"Transformation type: {transformation!r} is not supported by `apply`: it takes a Batch, "
        "MapTransform, RandomMapTransform, MapWithIndexTransform or FilterTransform (aioloader's or Grain's)."
    )
