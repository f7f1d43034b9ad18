"""`aioloader/__init__.py` is the public API: a sorted `__all__` of the names DESIGN.md fixes."""

from __future__ import annotations

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
    public = {
        name
        for name, value in vars(aioloader).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(aioloader.__all__) == public
    assert set(aioloader.__all__) >= DESIGN_NAMES


def test_every_public_name_comes_from_a_private_module() -> None:
    for name in aioloader.__all__:
        module = getattr(aioloader, name).__module__
        assert module.startswith("aioloader._"), (name, module)
