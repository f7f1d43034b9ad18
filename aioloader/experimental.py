"""Grain's `grain.experimental`: the names of it that aioloader has.

With `import aioloader as grain`, `grain.experimental.FlatMapTransform`,
`grain.experimental.index_shuffle`, the packers, the zips, the flat maps, the limit,
the repeat, the rebatch, the thread prefetch and `device_put`, the window shuffles,
the next index, the Parquet rows, the cache, the element spec, the dataset options and the rest
below work as in Grain 0.2.
Each is aioloader's own; the names aioloader had before this module are at the top
level too (the same objects). The Dataset classes load when first named.
"""

import typing as _typing

from aioloader._common.lazy import lazy_names as _lazy_names
from aioloader._operations.transforms import FlatMapTransform, MapWithIndexTransform
from aioloader._sampling.index_shuffle import index_shuffle

_LAZY = {
    "BOSHandling": "aioloader._operations.concat_then_split",
    "BestFitPackIterDataset": "aioloader._dataset.iter_packing",
    "CacheIterDataset": "aioloader._dataset.cache",
    "ConcatThenSplitIterDataset": "aioloader._dataset.iter_packing",
    "DatasetOptions": "aioloader._dataset.options",
    "ExecutionTrackingMode": "aioloader._dataset.options",
    "FirstFitPackIterDataset": "aioloader._dataset.iter_packing",
    "FlatMapIterDataset": "aioloader._dataset.flat_mapping",
    "FlatMapMapDataset": "aioloader._dataset.flat_mapping",
    "InterleaveIterDataset": "aioloader._dataset.interleave",
    "LimitIterDataset": "aioloader._dataset.limit",
    "ParquetIterDataset": "aioloader._dataset.parquet",
    "PerformanceConfig": "aioloader._dataset.performance",
    "RebatchIterDataset": "aioloader._dataset.rebatch",
    "RepeatIterDataset": "aioloader._dataset.iter_repeat",
    "ShapeDtypeStruct": "aioloader._dataset.element_spec",
    "ShapeDtypeStructProtocol": "aioloader._dataset.element_spec",
    "TFRecordIterDataset": "aioloader._dataset.tfrecord",
    "ThreadPrefetchIterDataset": "aioloader._dataset.thread_prefetch",
    "WindowShuffleMapDataset": "aioloader._dataset.window_shuffle",
    "WindowShuffleIterDataset": "aioloader._dataset.window_shuffle",
    "WithOptionsIterDataset": "aioloader._dataset.with_options",
    "ZipIterDataset": "aioloader._dataset.zipping",
    "ZipMapDataset": "aioloader._dataset.zipping",
    "apply_transformations": "aioloader._dataset.transformations",
    "assert_equal_output_after_checkpoint": "aioloader._dataset.checkpoint_check",
    "batch_and_pad": "aioloader._dataset.batching",
    "device_put": "aioloader._dataset.thread_prefetch",
    "get_element_spec": "aioloader._dataset.element_spec",
    "get_next_index": "aioloader._dataset.next_index",
    "multithread_prefetch": "aioloader._dataset.prefetch",
    "pick_performance_config": "aioloader._dataset.performance",
    "set_next_index": "aioloader._dataset.next_index",
}

if _typing.TYPE_CHECKING:
    from aioloader._dataset.batching import batch_and_pad
    from aioloader._dataset.cache import CacheIterDataset
    from aioloader._dataset.checkpoint_check import assert_equal_output_after_checkpoint
    from aioloader._dataset.element_spec import ShapeDtypeStruct, ShapeDtypeStructProtocol, get_element_spec
    from aioloader._dataset.flat_mapping import FlatMapIterDataset, FlatMapMapDataset
    from aioloader._dataset.interleave import InterleaveIterDataset
    from aioloader._dataset.iter_packing import (
        BestFitPackIterDataset,
        ConcatThenSplitIterDataset,
        FirstFitPackIterDataset,
    )
    from aioloader._dataset.iter_repeat import RepeatIterDataset
    from aioloader._dataset.limit import LimitIterDataset
    from aioloader._dataset.next_index import get_next_index, set_next_index
    from aioloader._dataset.options import DatasetOptions, ExecutionTrackingMode
    from aioloader._dataset.parquet import ParquetIterDataset
    from aioloader._dataset.performance import PerformanceConfig, pick_performance_config
    from aioloader._dataset.prefetch import multithread_prefetch
    from aioloader._dataset.rebatch import RebatchIterDataset
    from aioloader._dataset.tfrecord import TFRecordIterDataset
    from aioloader._dataset.thread_prefetch import ThreadPrefetchIterDataset, device_put
    from aioloader._dataset.transformations import apply_transformations
    from aioloader._dataset.window_shuffle import WindowShuffleIterDataset, WindowShuffleMapDataset
    from aioloader._dataset.with_options import WithOptionsIterDataset
    from aioloader._dataset.zipping import ZipIterDataset, ZipMapDataset
    from aioloader._operations.concat_then_split import BOSHandling
else:  # hidden from type checkers, which see the imports above
    __getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__all__ = [
    "BOSHandling",
    "BestFitPackIterDataset",
    "CacheIterDataset",
    "ConcatThenSplitIterDataset",
    "DatasetOptions",
    "ExecutionTrackingMode",
    "FirstFitPackIterDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "InterleaveIterDataset",
    "LimitIterDataset",
    "MapWithIndexTransform",
    "ParquetIterDataset",
    "PerformanceConfig",
    "RebatchIterDataset",
    "RepeatIterDataset",
    "ShapeDtypeStruct",
    "ShapeDtypeStructProtocol",
    "TFRecordIterDataset",
    "ThreadPrefetchIterDataset",
    "WindowShuffleIterDataset",
    "WindowShuffleMapDataset",
    "WithOptionsIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
    "batch_and_pad",
    "device_put",
    "get_element_spec",
    "get_next_index",
    "index_shuffle",
    "multithread_prefetch",
    "pick_performance_config",
    "set_next_index",
]
