"""aioloader: a deterministic, resumable data loader for JAX on asyncio and threads.

The pipeline, one private module per stage (see DESIGN.md and README.md):

    _sampler          IndexSampler / SequentialSampler: output position -> record key
    _planner          chunks of sampler indices, sized to about a millisecond of work
    _program          what a worker does with a chunk: read (_records), operations (_apply),
                      batching (_batching)
    _thread_executor  N worker threads, each with its own copy of the operations
    _interpreter_executor  or N worker threads, each running the per-record work in its own
                      subinterpreter (_subinterpreters, _interpreter_worker)
    _reassembly       results back in sampler order, within a bounded window (_window)
    _tail             batch boundaries after a filter or flat-map, cut in order
    _pipeline         the stages above, assembled on one event loop
    _loop_thread      the event loop thread behind `for batch in loader`
    _iterators        the sync and async iterators and their checkpoint state (_state)

The data sources, one module each (_sources holds the protocols):

    _arrayrecord      ArrayRecord files, through `array_record` or aioloader's own reader
                      (_arrayrecord_file over _riegeli, _compression and _wire)
    _parquet          Parquet rows by key, row groups cached within a memory bound (_cache)
    _files            whole files as records, read with async I/O
    _frames           a Hugging Face `datasets.Dataset` or a Polars DataFrame, by row (_arrow)
    _sqlite           a SQLite table, by row, through a pool of read-only connections

Grain's Dataset API (_dataset): `MapDataset[T]`, a lazy tree with random access, one
module per family of transformations (sources, slicing, repeat, shuffle, mapping,
batching, mixing). Packing sequences into rows is in _operations (packing,
concat_then_split), as plain algorithms with explicit state.

This file is the public API: everything a user imports comes from here.
"""

from aioloader._common.options import ReadOptions
from aioloader._dataset.base import MapDataset
from aioloader._device.device_put import DevicePut
from aioloader._iteration.iterators import AsyncDataLoaderIterator, DataLoaderIterator
from aioloader._loader import DataLoader
from aioloader._operations.transforms import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    MapTransform,
    RandomMapTransform,
)
from aioloader._sampling.metadata import RecordMetadata
from aioloader._sampling.sampler import IndexSampler, SequentialSampler
from aioloader._sampling.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from aioloader._sources.arrayrecord.source import ArrayRecordDataSource
from aioloader._sources.files import FilesDataSource
from aioloader._sources.frames import HuggingFaceDataSource, PolarsDataSource
from aioloader._sources.parquet import ParquetDataSource
from aioloader._sources.protocols import (
    AsyncDataSource,
    InMemoryDataSource,
    RandomAccessDataSource,
    RangeDataSource,
)
from aioloader._sources.sqlite import SQLiteDataSource

__all__ = [
    "ArrayRecordDataSource",
    "AsyncDataLoaderIterator",
    "AsyncDataSource",
    "Batch",
    "DataLoader",
    "DataLoaderIterator",
    "DevicePut",
    "FilesDataSource",
    "FilterTransform",
    "FlatMapTransform",
    "HuggingFaceDataSource",
    "InMemoryDataSource",
    "IndexSampler",
    "MapDataset",
    "MapTransform",
    "NoSharding",
    "ParquetDataSource",
    "PolarsDataSource",
    "RandomAccessDataSource",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "RecordMetadata",
    "SQLiteDataSource",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
]
