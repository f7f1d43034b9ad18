"""Grain's `grain.experimental`: the names of it that aioloader has.

With `import aioloader as grain`, `grain.experimental.FlatMapTransform`,
`grain.experimental.index_shuffle`, the packers and the rest below work as in Grain
0.2; each is aioloader's own (also at the top level, but for `apply_transformations`
and `index_shuffle`). The Dataset classes load when first named.
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
    "InterleaveIterDataset": "aioloader._dataset.interleave",
    "WindowShuffleIterDataset": "aioloader._dataset.window_shuffle",
    "apply_transformations": "aioloader._dataset.transformations",
}

if _typing.TYPE_CHECKING:
    from aioloader._dataset.interleave import InterleaveIterDataset
    from aioloader._dataset.iter_packing import (
        BestFitPackIterDataset,
        ConcatThenSplitIterDataset,
        FirstFitPackIterDataset,
    )
    from aioloader._dataset.transformations import apply_transformations
    from aioloader._dataset.window_shuffle import WindowShuffleIterDataset
    from aioloader._operations.concat_then_split import BOSHandling
else:  # hidden from type checkers, which see the imports above
    __getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__all__ = [
    "BOSHandling",
    "BestFitPackIterDataset",
    "ConcatThenSplitIterDataset",
    "FirstFitPackIterDataset",
    "FlatMapTransform",
    "InterleaveIterDataset",
    "MapWithIndexTransform",
    "WindowShuffleIterDataset",
    "apply_transformations",
    "index_shuffle",
]
