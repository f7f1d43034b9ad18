"""aioloader: a deterministic, resumable data loader for JAX on asyncio and threads.

This file is the public API: everything a user imports comes from here, and
`__all__` lists it, sorted. The rest of the package is private, one folder
per part of the pipeline, each importing only the folders before it:

    _common       the shared vocabulary: options, checks, failures, positions
    _observability  per-thread counters, statistics snapshots, their report and exports
    _sampling     which record comes at each position (samplers, sharding)
    _sources      the read: source protocols and storage formats (ArrayRecord, Parquet, files)
    _operations   the user's transforms and batching, applied to a run of elements
    _program      what a worker does with one chunk of records, step by step
    _scheduling   chunks out, results back in order, within bounded windows
    _executors    who runs the steps: worker threads, subinterpreters, or the caller (inline)
    _device       the device stage: batches onto the accelerator ahead of the step
    _iteration    the iterators behind `for` and `async for`, their engines and checkpoints
    _loader       DataLoader, which checks its arguments and makes the iterators
    _dataset      Grain's Dataset API: MapDataset (random access) and IterDataset (in order),
                  whose parallel parts run as DataLoaders on the same engine

aioloader/README.md has the full tree, the life of one chunk from sampler
index to `next()`, a glossary, and which thread runs what under which lock.
"""

import typing as _typing

from aioloader._common.lazy import lazy_names as _lazy_names
from aioloader._common.options import MultiprocessingOptions, ReadOptions
from aioloader._device.device_put import DevicePut
from aioloader._iteration.iterators import AsyncDataLoaderIterator, DataLoaderIterator
from aioloader._loader import DataLoader, load
from aioloader._operations.transforms import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
)
from aioloader._sampling.metadata import (
    DATASET_INDEX,
    EPOCH,
    INDEX,
    META_FEATURES,
    RECORD,
    RECORD_KEY,
    SEED,
    Record,
    RecordMetadata,
)
from aioloader._sampling.sampler import IndexSampler, Sampler, SequentialSampler
from aioloader._sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from aioloader._sources.protocols import (
    AsyncDataSource,
    InMemoryDataSource,
    RandomAccessDataSource,
    RangeDataSource,
)

PyGrainDatasetIterator = DataLoaderIterator  # Grain's former name of the DataLoader's iterator

__version__ = "0.1.0"  # pyproject.toml's (a test checks that they agree)

# Imported above: what `DataLoader(...)` and `for batch in loader` need, and
# nothing else. The names below load on first use, each from its module: a
# user's script pays for `import aioloader` before its first batch, and a
# loader over memory never needs them (a test checks it in a fresh process).
# The storage formats import asyncio and ssl (aiofiles), sqlite3,
# zlib/bz2/lzma and subprocess (the checksum's compiler); the Dataset API is
# some twenty modules (packing, interleaving, its own stages); the exports
# import logging and prometheus_client when used.
_LAZY = {
    "ArrayRecordDataSource": "aioloader._sources.arrayrecord.source",
    "AsyncDatasetIterator": "aioloader._dataset.iterator",
    "BOSHandling": "aioloader._operations.concat_then_split",
    "BatchOperation": "aioloader._operations.legacy",
    "BestFitPackIterDataset": "aioloader._dataset.iter_packing",
    "BufferStatistics": "aioloader._observability.statistics",
    "ConcatThenSplitIterDataset": "aioloader._dataset.iter_packing",
    "DatasetIterator": "aioloader._dataset.iterator",
    "DatasetSelectionMap": "aioloader._dataset.mixing",
    "FilesDataSource": "aioloader._sources.files",
    "FilterOperation": "aioloader._operations.legacy",
    "FirstFitPackIterDataset": "aioloader._dataset.iter_packing",
    "HuggingFaceDataSource": "aioloader._sources.frames",
    "InterleaveIterDataset": "aioloader._dataset.interleave",
    "IterDataset": "aioloader._dataset.iter_base",
    "LoaderStatistics": "aioloader._observability.statistics",
    "MapDataset": "aioloader._dataset.base",
    "MapOperation": "aioloader._operations.legacy",
    "Operation": "aioloader._operations.legacy",
    "ParquetDataSource": "aioloader._sources.parquet",
    "PolarsDataSource": "aioloader._sources.frames",
    "RandomMapOperation": "aioloader._operations.legacy",
    "SQLiteDataSource": "aioloader._sources.sqlite",
    "StageStatistics": "aioloader._observability.statistics",
    "ThreadStatistics": "aioloader._observability.statistics",
    "Transformation": "aioloader.transforms",
    "Transformations": "aioloader.transforms",
    "WindowShuffleIterDataset": "aioloader._dataset.window_shuffle",
    "config": "aioloader._observability.config",
    "log_statistics": "aioloader._observability.logs",
    "register_metrics": "aioloader._observability.prometheus",
}
# Grain's namespaces (`grain.transforms.Map`, `grain.samplers.IndexSampler`, ...), and the
# orbax checkpoint handlers: imported when first named, never listed by `dir()`.
_SUBMODULES = ("checkpoint", "experimental", "samplers", "sharding", "sources", "transforms")
# Grain's names of the orbax handler (`grain.PyGrainCheckpointSave`): they need orbax-checkpoint,
# so, like `checkpoint`, they load when named and `dir()` does not list them.
_NEED_ORBAX = {
    name: "aioloader._iteration.orbax"
    for name in ("PyGrainCheckpointHandler", "PyGrainCheckpointRestore", "PyGrainCheckpointSave")
}

if _typing.TYPE_CHECKING:
    from aioloader._dataset.base import MapDataset
    from aioloader._dataset.interleave import InterleaveIterDataset
    from aioloader._dataset.iter_base import IterDataset
    from aioloader._dataset.iter_packing import (
        BestFitPackIterDataset,
        ConcatThenSplitIterDataset,
        FirstFitPackIterDataset,
    )
    from aioloader._dataset.iterator import AsyncDatasetIterator, DatasetIterator
    from aioloader._dataset.mixing import DatasetSelectionMap
    from aioloader._dataset.window_shuffle import WindowShuffleIterDataset
    from aioloader._iteration.orbax import (  # re-exported, loaded when named (see _NEED_ORBAX)
        PyGrainCheckpointHandler as PyGrainCheckpointHandler,
    )
    from aioloader._iteration.orbax import (
        PyGrainCheckpointRestore as PyGrainCheckpointRestore,
    )
    from aioloader._iteration.orbax import (
        PyGrainCheckpointSave as PyGrainCheckpointSave,
    )
    from aioloader._observability.config import config
    from aioloader._observability.logs import log_statistics
    from aioloader._observability.prometheus import register_metrics
    from aioloader._observability.statistics import (
        BufferStatistics,
        LoaderStatistics,
        StageStatistics,
        ThreadStatistics,
    )
    from aioloader._operations.concat_then_split import BOSHandling
    from aioloader._operations.legacy import (
        BatchOperation,
        FilterOperation,
        MapOperation,
        Operation,
        RandomMapOperation,
    )
    from aioloader._sources.arrayrecord.source import ArrayRecordDataSource
    from aioloader._sources.files import FilesDataSource
    from aioloader._sources.frames import HuggingFaceDataSource, PolarsDataSource
    from aioloader._sources.parquet import ParquetDataSource
    from aioloader._sources.sqlite import SQLiteDataSource
    from aioloader.transforms import Transformation, Transformations
else:  # hidden from type checkers, which see the imports above and reject unknown names
    __getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals(), _SUBMODULES, _NEED_ORBAX)


__all__ = [
    "ArrayRecordDataSource",
    "AsyncDataLoaderIterator",
    "AsyncDataSource",
    "AsyncDatasetIterator",
    "BOSHandling",
    "Batch",
    "BatchOperation",
    "BestFitPackIterDataset",
    "BufferStatistics",
    "ConcatThenSplitIterDataset",
    "DATASET_INDEX",
    "DataLoader",
    "DataLoaderIterator",
    "DatasetIterator",
    "DatasetSelectionMap",
    "DevicePut",
    "EPOCH",
    "FilesDataSource",
    "FilterOperation",
    "FilterTransform",
    "FirstFitPackIterDataset",
    "FlatMapTransform",
    "HuggingFaceDataSource",
    "INDEX",
    "InMemoryDataSource",
    "IndexSampler",
    "InterleaveIterDataset",
    "IterDataset",
    "LoaderStatistics",
    "META_FEATURES",
    "MapDataset",
    "MapOperation",
    "MapTransform",
    "MapWithIndexTransform",
    "MultiprocessingOptions",
    "NoSharding",
    "Operation",
    "ParquetDataSource",
    "PolarsDataSource",
    "PyGrainDatasetIterator",
    "RECORD",
    "RECORD_KEY",
    "RandomAccessDataSource",
    "RandomMapOperation",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "SEED",
    "SQLiteDataSource",
    "Sampler",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "StageStatistics",
    "ThreadStatistics",
    "Transformation",
    "Transformations",
    "WindowShuffleIterDataset",
    "config",
    "load",
    "log_statistics",
    "register_metrics",
]
