"""Grain's `grain.experimental`: the names of it that aioloader has.

With `import aioloader as grain`, `grain.experimental.FlatMapTransform`,
`grain.experimental.index_shuffle`, the packers, the zips, the flat maps, the limit and
the rest below work as in Grain 0.2; each is aioloader's own (also at the top level for
those aioloader had before: not the zips, flat maps, limit, `batch_and_pad`,
`apply_transformations` and `index_shuffle`). The Dataset classes load when first named.
"""

import typing as _typing

from aioloader._common.lazy import lazy_names as _lazy_names
from aioloader._operations.transforms import FlatMapTransform, MapWithIndexTransform
from aioloader._sampling.index_shuffle import index_shuffle

_LAZY = {
    "BOSHandling": "aioloader._operations.concat_then_split",
    "BestFitPackIterDataset": "aioloader._dataset.iter_packing",
    "ConcatThenSplitIterDataset": "aioloader._dataset.iter_packing",
    "FirstFitPackIterDataset": "aioloader._dataset.iter_packing",
    "FlatMapIterDataset": "aioloader._dataset.flat_mapping",
    "FlatMapMapDataset": "aioloader._dataset.flat_mapping",
    "InterleaveIterDataset": "aioloader._dataset.interleave",
    "LimitIterDataset": "aioloader._dataset.limit",
    "WindowShuffleIterDataset": "aioloader._dataset.window_shuffle",
    "ZipIterDataset": "aioloader._dataset.zipping",
    "ZipMapDataset": "aioloader._dataset.zipping",
    "apply_transformations": "aioloader._dataset.transformations",
    "batch_and_pad": "aioloader._dataset.batching",
}

if _typing.TYPE_CHECKING:
    from aioloader._dataset.batching import batch_and_pad
    from aioloader._dataset.flat_mapping import FlatMapIterDataset, FlatMapMapDataset
    from aioloader._dataset.interleave import InterleaveIterDataset
    from aioloader._dataset.iter_packing import (
        BestFitPackIterDataset,
        ConcatThenSplitIterDataset,
        FirstFitPackIterDataset,
    )
    from aioloader._dataset.limit import LimitIterDataset
    from aioloader._dataset.transformations import apply_transformations
    from aioloader._dataset.window_shuffle import WindowShuffleIterDataset
    from aioloader._dataset.zipping import ZipIterDataset, ZipMapDataset
    from aioloader._operations.concat_then_split import BOSHandling
else:  # hidden from type checkers, which see the imports above
    __getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__all__ = [
    "BOSHandling",
    "BestFitPackIterDataset",
    "ConcatThenSplitIterDataset",
    "FirstFitPackIterDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "InterleaveIterDataset",
    "LimitIterDataset",
    "MapWithIndexTransform",
    "WindowShuffleIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "batch_and_pad",
    "index_shuffle",
]
