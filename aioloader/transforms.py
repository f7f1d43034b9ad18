"""Grain's `grain.transforms`: the transform classes under Grain's short names.

With `import aioloader as grain`, `grain.transforms.Map` and the rest work as in Grain
0.2; each name is aioloader's class (`Map` is `aioloader.MapTransform`, ...).
"""

from collections.abc import Sequence
from typing import Union

from aioloader._operations.transforms import Batch
from aioloader._operations.transforms import FilterTransform as Filter
from aioloader._operations.transforms import FlatMapTransform as _FlatMap
from aioloader._operations.transforms import MapTransform as Map
from aioloader._operations.transforms import MapWithIndexTransform as MapWithIndex
from aioloader._operations.transforms import RandomMapTransform as RandomMap

Transformation = Union[Batch, Map, RandomMap, MapWithIndex, Filter, _FlatMap]  # noqa: UP007 - a runtime alias, as Grain's
Transformations = Sequence[Transformation]

__all__ = ["Batch", "Filter", "Map", "MapWithIndex", "RandomMap", "Transformation", "Transformations"]
