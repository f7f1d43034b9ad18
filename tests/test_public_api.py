"""`aioloader/__init__.py` is the public API: a sorted `__all__` of the names DESIGN.md fixes."""

from __future__ import annotations

import inspect
import types

import aioloader

DESIGN_NAMES = {
    "RecordMetadata",
    "IndexSampler",
    "SequentialSampler",
    "ShardOptions",
    "NoSharding",
    "ShardByJaxProcess",
    "RandomAccessDataSource",
    "AsyncDataSource",
    "InMemoryDataSource",
    "RangeDataSource",
    "MapTransform",
    "RandomMapTransform",
    "FilterTransform",
    "FlatMapTransform",
    "Batch",
    "ReadOptions",
    "DataLoader",
    "MapDataset",
    "ArrayRecordDataSource",
    "ParquetDataSource",
    "FilesDataSource",
}


def test_all_is_sorted_and_complete() -> None:
    assert aioloader.__all__ == sorted(aioloader.__all__)
    # Submodules (`aioloader.checkpoint`) appear as attributes once imported; they are not names.
    # `dir` lists the storage sources too, which load when first named (test_lazy_imports.py).
    # The orbax handler's Grain names appear once loaded (another test may have named them).
    public = {
        name
        for name in set(dir(aioloader)) - set(aioloader._NEED_ORBAX)
        if not name.startswith("_") and not isinstance(getattr(aioloader, name), types.ModuleType)
    }
    assert set(aioloader.__all__) == public
    assert set(aioloader.__all__) >= DESIGN_NAMES


TYPE_ALIASES = {"Transformation", "Transformations"}  # typing's objects, as Grain's are
# Grain's metadata constants: strings, and a frozenset of them.
CONSTANTS = {"DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED"}


def test_every_public_name_comes_from_a_private_module() -> None:
    for name in set(aioloader.__all__) - TYPE_ALIASES - CONSTANTS:
        module = getattr(aioloader, name).__module__
        assert module.startswith("aioloader._"), (name, module)


# The two iterators mirror each other name for name; these are the pairs whose names differ.
SYNC_TO_ASYNC = {
    "__iter__": "__aiter__",
    "__next__": "__anext__",
    "__enter__": "__aenter__",
    "__exit__": "__aexit__",
    "close": "aclose",
}
# Grain's iterator has `next()`; an async one is advanced by the builtin `anext()`.
SYNC_ONLY = {"next"}


def mirrored_names(cls: type, dunders: set[str]) -> set[str]:
    """The public methods `cls` defines, and the protocol methods it has."""
    return {n for n in vars(cls) if not n.startswith("_")} | {d for d in dunders if hasattr(cls, d)}


def test_the_sync_and_async_iterators_mirror_each_other() -> None:
    sync_names = mirrored_names(aioloader.DataLoaderIterator, set(SYNC_TO_ASYNC))
    async_names = mirrored_names(aioloader.AsyncDataLoaderIterator, set(SYNC_TO_ASYNC.values()))
    assert {SYNC_TO_ASYNC.get(name, name) for name in sync_names - SYNC_ONLY} == async_names
    for name in sync_names - SYNC_ONLY - {"__next__"}:  # chain's __next__ is a C slot
        sync_method = getattr(aioloader.DataLoaderIterator, name)
        async_method = getattr(aioloader.AsyncDataLoaderIterator, SYNC_TO_ASYNC.get(name, name))
        assert list(inspect.signature(sync_method).parameters) == list(
            inspect.signature(async_method).parameters
        ), name
