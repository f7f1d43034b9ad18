"""Grain's `grain.transforms`: the transform classes under Grain's short names.

With `import aioloader as grain`, `grain.transforms.Map` and the rest work as in Grain
0.2; each name is aioloader's class (`Map` is `aioloader.MapTransform`, ...).
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

from aioloader._common.lazy import lazy_names as _lazy_names
from aioloader._operations.transforms import Batch
from aioloader._operations.transforms import FilterTransform as Filter
from aioloader._operations.transforms import FlatMapTransform as _FlatMap
from aioloader._operations.transforms import MapTransform as Map
from aioloader._operations.transforms import MapWithIndexTransform as MapWithIndex
from aioloader._operations.transforms import RandomMapTransform as RandomMap
from aioloader._operations.transforms import TfRandomMapTransform as TfRandomMap

Transformation = Union[Batch, Map, RandomMap, TfRandomMap, MapWithIndex, Filter, _FlatMap]  # noqa: UP007 - a runtime alias, as Grain's
Transformations = Sequence[Transformation]

if TYPE_CHECKING:
    from aioloader._dataset.mixing import DatasetSelectionMap

# The Dataset API loads when first named (see `aioloader._common.lazy`).
__getattr__, __dir__ = _lazy_names(__name__, {"DatasetSelectionMap": "aioloader._dataset.mixing"}, globals())

__all__ = [
    "Batch",
    "DatasetSelectionMap",
    "Filter",
    "Map",
    "MapWithIndex",
    "RandomMap",
    "TfRandomMap",
    "Transformation",
    "Transformations",
]
