"""Sources over tables users already hold in memory: a Hugging Face `datasets.Dataset`
and a Polars `DataFrame`, read by row index.

Both are immutable once the source is made (the source keeps its own column
selection), so reads from many worker threads need no lock; each source says below
why its reads are safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aioloader._sources.arrow import ArrowRows
from aioloader._sources.columns import choose_columns, require_columns
from aioloader._sources.keys import require_key


class HuggingFaceDataSource:
    """The rows of a Hugging Face `datasets.Dataset`: `source[key]` is `dataset[key]`,
    limited to `columns` (all of them by default), in the dataset's own format.

    Values are what the dataset gives: Python lists and scalars by default, numpy
    arrays after `dataset.with_format("numpy")`. A batch of keys is one call to the
    dataset (`__getitems__`), which reads its Arrow table once for the batch.

    Thread-safe: a `Dataset` reads an immutable (memory-mapped) Arrow table, and
    formats every read into new objects; nothing is written while reading.
    Needs `datasets` (`pip install 'aioloader[hf]'`).
    """

    def __init__(self, dataset: Any, columns: Sequence[str] | None = None) -> None:
        import datasets  # type: ignore[import-untyped]  # optional: `pip install 'aioloader[hf]'`

        _refuse_other_kinds(datasets, dataset)
        chosen = choose_columns(require_columns(columns), dataset.column_names, "the dataset")
        self.columns = tuple(chosen)
        self._dataset = dataset if columns is None else dataset.select_columns(chosen)
        self._length = len(self._dataset)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, key: int) -> Any:
        return self._dataset[require_key(key, self._length)]

    def __getitems__(self, keys: Sequence[int]) -> list[Any]:
        """The rows at `keys`, in order, read with one call to the dataset."""
        checked = [require_key(key, self._length) for key in keys]
        return list(self._dataset.__getitems__(checked)) if checked else []

    def __repr__(self) -> str:
        return f"HuggingFaceDataSource(<Dataset of {self._length} rows>, columns={list(self.columns)!r})"


def _refuse_other_kinds(datasets: Any, dataset: Any) -> None:
    """A dict of splits or a streaming dataset has no rows by index: say what to pass instead."""
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise TypeError(
            f"`dataset` must be one split, such as dataset[{next(iter(dataset), 'train')!r}], "
            f"got a {type(dataset).__name__} of splits {list(dataset)!r}."
        )
    if isinstance(dataset, datasets.IterableDataset):
        raise TypeError(
            "`dataset` must be a datasets.Dataset with rows by index, got an IterableDataset "
            "(load it without streaming=True)."
        )
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(f"`dataset` must be a datasets.Dataset, got {type(dataset).__name__}.")


class PolarsDataSource:
    """The rows of a Polars `DataFrame`: dicts of column name to value, limited to `columns`
    (all of them by default), with values as `ParquetDataSource` gives them (numpy scalars
    for numbers, numpy arrays for lists of numbers, None for nulls).

    The frame is turned into Arrow once, when the source is made (Polars shares its
    buffers, so this copies little), and read from there.

    Thread-safe: the Arrow table and the numpy views of it are never written; every
    read makes new objects. Needs `polars` and `pyarrow`
    (`pip install 'aioloader[polars,parquet]'`).
    """

    def __init__(self, frame: Any, columns: Sequence[str] | None = None) -> None:
        import polars as pl  # an optional dependency, already imported by whoever made `frame`

        if isinstance(frame, pl.LazyFrame):
            raise TypeError("`frame` must be a polars.DataFrame, got a LazyFrame: call .collect() first.")
        if not isinstance(frame, pl.DataFrame):
            raise TypeError(f"`frame` must be a polars.DataFrame, got {type(frame).__name__}.")
        self.columns = tuple(choose_columns(require_columns(columns), frame.columns, "the frame"))
        try:
            table = frame.select(self.columns).to_arrow()
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                "PolarsDataSource needs pyarrow: pip install 'aioloader[parquet]'."
            ) from error
        self._rows = ArrowRows(table)
        self._length = frame.height

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, key: int) -> dict[str, Any]:
        return self._rows.rows([require_key(key, self._length)])[0]

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at `keys`, in order."""
        return self._rows.rows([require_key(key, self._length) for key in keys])

    def __repr__(self) -> str:
        return f"PolarsDataSource(<DataFrame of {self._length} rows>, columns={list(self.columns)!r})"
