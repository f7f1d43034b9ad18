"""Grain's `grain.sources`, and aioloader's other data sources under the same roof.

`SharedMemoryDataSource` is Grain's name for `InMemoryDataSource` (aioloader's threads
read the elements where they are: nothing is copied to shared memory). The file formats
load when first named, as from the top-level package.
"""

import typing as _typing

from aioloader._common.lazy import lazy_names as _lazy_names
from aioloader._sources.protocols import (
    AsyncDataSource,
    InMemoryDataSource,
    RandomAccessDataSource,
    RangeDataSource,
)

SharedMemoryDataSource = InMemoryDataSource

_LAZY = {
    "ArrayRecordDataSource": "aioloader._sources.arrayrecord.source",
    "FilesDataSource": "aioloader._sources.files",
    "ParquetDataSource": "aioloader._sources.parquet",
}

if _typing.TYPE_CHECKING:
    from aioloader._sources.arrayrecord.source import ArrayRecordDataSource
    from aioloader._sources.files import FilesDataSource
    from aioloader._sources.parquet import ParquetDataSource
else:  # hidden from type checkers, which see the imports above
    __getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__all__ = [
    "ArrayRecordDataSource",
    "AsyncDataSource",
    "FilesDataSource",
    "InMemoryDataSource",
    "ParquetDataSource",
    "RandomAccessDataSource",
    "RangeDataSource",
    "SharedMemoryDataSource",
]
