"""The parallel part of an IterDataset pipeline, on aioloader's engine.

`MapDataset.to_iter_dataset()` starts a part (`ToIterDataset`, Grain's
`PrefetchIterDataset`): the MapDataset read by index in order, without its `None`
holes. The maps, random maps and filters that follow join the part, and so does one
batch, with the maps and filters after it (see `iter_mapping`), until something that
must run in order comes (a mix, a window shuffle, an interleave, a packer, a second
batch).

A part compiles to a `DataLoader`: its data source is the MapDataset (`ds[i]`, and
`ds._getitems(keys)` for a chunk of indices), its sampler gives the indices 0, 1, 2, ...
in order, and its operations are the part's. It runs on the DataLoader's engine, the
only one there is: the scheduler, the worker threads or subinterpreters, the ordered
reassembly, the device stage. Its checkpoint is the DataLoader iterator's state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aioloader._common.options import ReadOptions
from aioloader._common.positions import Position
from aioloader._common.validation import require_bool
from aioloader._dataset.base import MapDataset, graph
from aioloader._dataset.filter_checks import CheckedPartStage, Mark, PassDropped, checks_filters
from aioloader._dataset.iter_base import IterDataset
from aioloader._dataset.stages import Part, Plan, Settings, Stage, state_fields
from aioloader._device.device_put import DevicePut
from aioloader._iteration.iterators import AsyncDataLoaderIterator, DataLoaderIterator, position_of, state_at
from aioloader._loader import DataLoader
from aioloader._observability.statistics import LoaderStatistics
from aioloader._operations.transforms import Batch, Kind, Prepared, is_not_none
from aioloader._sampling.metadata import RecordMetadata
from aioloader._sampling.sampler import IndexSampler
from aioloader._sources.protocols import digest

T = TypeVar("T")


class ToIterDataset(IterDataset[T]):
    """`MapDataset.to_iter_dataset(read_options, allow_nones=)`: the start of a parallel part."""

    def __init__(self, parent: MapDataset[T], read_options: Any, *, allow_nones: bool) -> None:
        super().__init__(parent)
        self._parent = parent
        self._read_options = _require_read_options(read_options)
        self._allow_nones = require_bool("allow_nones", allow_nones)

    def _plan(self, settings: Settings) -> Plan:
        drop_holes = Prepared(Kind.FILTER, is_not_none, "to_iter_dataset", "dropping the None holes")
        first = () if self._allow_nones else (drop_holes,)
        holes = may_hold_holes(self._parent)  # once per compile: it may scan a long list
        return EnginePart(self._parent, self._read_options, settings, first, self._allow_nones, holes)

    def __repr__(self) -> str:
        return f"{self._parent!r}.to_iter_dataset(allow_nones={self._allow_nones})"


@dataclasses.dataclass(frozen=True)
class EnginePart(Part):
    """A parallel part being compiled: the MapDataset, and the operations after it."""

    dataset: MapDataset[Any]
    read_options: ReadOptions
    settings: Settings
    operations: tuple[Prepared | Batch, ...]
    allow_nones: bool
    holes: bool  # `may_hold_holes(dataset)`

    @property
    def batch_size(self) -> int | None:
        """The size of the part's batch, None before one joins."""
        return next((op.batch_size for op in self.operations if isinstance(op, Batch)), None)

    @property
    def checked(self) -> bool:
        """True when the options ask to check filters and the part has one that may drop:
        its filters then mark, and their checks run in order after it (`filter_checks`)."""
        return checks_filters(self.settings.options) and bool(self._dropping())

    def _dropping(self) -> dict[int, Prepared]:
        """The part's filters that may drop elements, by position."""
        return {
            i: op
            for i, op in enumerate(self.operations)
            if isinstance(op, Prepared)
            and op.kind is Kind.FILTER
            and (op.function is not is_not_none or self.holes)
        }

    def joined(self, operation: Any) -> EnginePart | None:
        if isinstance(operation, Batch) and self.batch_size is not None:
            return None  # the engine batches once; a second batch runs in order after the part
        if isinstance(operation, Batch) and self.checked:
            return None  # it would batch the marks: it batches in order, after the checks
        if self.allow_nones and isinstance(operation, Prepared) and operation.kind is not Kind.FILTER:
            # Grain's maps pass a None through untouched.
            operation = operation._replace(function=PassNone(operation.function))
        return dataclasses.replace(self, operations=(*self.operations, operation))

    def counts_elements(self) -> bool:
        filters = [op for op in self.operations if isinstance(op, Prepared) and op.kind is Kind.FILTER]
        if any(op.function is not is_not_none for op in filters):
            return False  # the user's filter drops elements
        return self.allow_nones or not self.holes

    def loader(self, device_put: DevicePut | None = None) -> DataLoader:
        """The DataLoader that runs this part (its filters marking, where `checked`)."""
        source = MapDatasetSource(self.dataset)
        # Grain's samplers hold at least one record; an empty MapDataset (an empty file, a
        # slice past the end) reads nothing, as Grain's `to_iter_dataset()` does.
        sampler = (
            IndexSampler(len(source), shuffle=False, num_epochs=1, seed=0) if len(source) else NoIndices()
        )
        return DataLoader(
            data_source=source,
            sampler=sampler,
            operations=self._marking() if self.checked else self._labelled(),
            worker_count=self.settings.worker_count,
            executor=self.settings.executor,
            read_options=self.read_options,
            # A part holds at most `read_options.prefetch_buffer_size` records, as
            # Grain's `to_iter_dataset(read_options)` buffer: no per-worker extra.
            worker_buffer_size=0,
            device_put=device_put,
        )

    def build(self, device_put: DevicePut | None = None) -> Stage[Any]:
        if not self.checked:
            return EngineStage(self.loader(device_put))
        assert device_put is None, "a checked part is compiled to a stage first (see `iterator`)"
        labels = [self._label(op) for op in self._dropping().values()]
        return CheckedPartStage(EngineStage(self.loader()), labels, self.settings.options)

    def _labelled(self) -> list[Prepared | Batch]:
        """The operations, each filter with Grain's name for its warning (`FilterWindows`)."""
        return [
            op._replace(grain_label=self._label(op))
            if isinstance(op, Prepared) and op.kind is Kind.FILTER
            else op
            for op in self.operations
        ]

    def _marking(self) -> list[Prepared | Batch]:
        """The operations with each dropping filter a `Mark` (numbered in order) and each map
        after the first one passing the marks on."""
        dropping = self._dropping()
        first, marked = min(dropping), list(self.operations)
        for number, (i, prepared) in enumerate(dropping.items()):
            mark = Mark(prepared.function, number, f"{prepared.name} ({prepared.what})")
            marked[i] = prepared._replace(kind=Kind.MAP, function=mark)
        for i, op in enumerate(marked):
            if i > first and isinstance(op, Prepared) and not isinstance(op.function, Mark):
                marked[i] = op._replace(function=PassDropped(op.function))
        return marked

    def _label(self, op: Prepared) -> str:
        """Grain's name of a filter in its checks' messages."""
        if op.function is is_not_none:
            return f"PrefetchDatasetIterator(read_options={self.read_options!r}, allow_nones=False)"
        return f"FilterDatasetIterator(transform={op.what.removesuffix('.filter')})"


class EngineStage(Stage[Any]):
    """A parallel part running: the outputs of its DataLoader's iterator.

    The iterator is made at once; its threads start at the first `next()`.
    """

    def __init__(self, loader: DataLoader) -> None:
        super().__init__()
        self._iterator: DataLoaderIterator = iter(loader)

    def __next__(self) -> Any:
        return next(self._iterator)

    def snapshot(self) -> Position:
        return position_of(self._iterator)

    def state_of(self, token: Position) -> dict[str, Any]:
        return engine_state(self._iterator, token)

    def set_state(self, state: dict[str, Any]) -> None:
        self._iterator.set_state(loader_state(state))

    def statistics(self) -> list[LoaderStatistics]:
        return [self._iterator.statistics()]

    def start_prefetch(self) -> None:
        self._iterator.start_prefetch()

    def close(self) -> None:
        self._iterator.close()


def engine_state(iterator: DataLoaderIterator | AsyncDataLoaderIterator, token: Position) -> dict[str, Any]:
    """A parallel part's state at `token` (a position of its DataLoader iterator): the
    loader's state as a dict, without the Grain fields of `get_state()`'s bytes, which a
    part's loader never needs."""
    return {"stage": "parallel", "loader": state_at(iterator, token)}


def loader_state(state: Any) -> dict[str, Any]:
    """The DataLoader iterator's state inside a parallel part's."""
    (loader,) = state_fields(state, "parallel", ("loader",))
    if not isinstance(loader, dict):
        raise ValueError(
            f"`state` of a parallel part must hold the loader's state (a dict), got {loader!r:.200}."
        )
    return loader


class MapDatasetSource:
    """A MapDataset as a data source: `source[i]` is `ds[i]`, `None` for a hole.

    It is read in the worker threads, never in a subinterpreter: a MapDataset's own
    nodes use NumPy, which isolated subinterpreters cannot load.
    """

    def __init__(self, dataset: MapDataset[Any]) -> None:
        self._dataset, self._length = dataset, len(dataset)
        # With no source of batched reads below, `__getitems__` is a loop over `ds[i]`: the
        # engine's read pool then reads the slow ones concurrently, as Grain's
        # `to_iter_dataset` reads with `read_options.num_threads` threads.
        self.loops_over_keys = not _reads_in_batches(dataset)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, key: int) -> Any:
        return self._dataset[key]

    def __getitems__(self, keys: Sequence[int]) -> list[Any]:
        return self._dataset._getitems(keys)

    def __reduce__(self) -> Any:
        raise TypeError("a MapDataset is read in the worker threads (its nodes use NumPy)")

    def state_identity(self) -> str:
        """What a state records of it: a digest of the graph's repr (its nodes, their seeds,
        slices and weights; a source by its type and length), so that a state resumes in the
        same pipeline only."""
        return digest(repr(self._dataset))

    def __repr__(self) -> str:
        return f"MapDatasetSource({self._dataset!r})"


class NoIndices:
    """The sampler of an empty MapDataset's part: no index at all."""

    def __len__(self) -> int:
        return 0

    def __getitem__(self, index: int) -> RecordMetadata:
        raise IndexError(f"an empty MapDataset has no index {index}")

    def __repr__(self) -> str:
        return "NoIndices()"


def _reads_in_batches(dataset: MapDataset[Any]) -> bool:
    """True when a source below `dataset` reads with `__getitems__`."""
    from aioloader._dataset.sources import SourceMapDataset

    return any(
        isinstance(node, SourceMapDataset) and hasattr(node.data_source, "__getitems__")
        for node in graph(dataset)
    )


def may_hold_holes(dataset: MapDataset[Any]) -> bool:
    """False when `dataset` has no `None` holes for `to_iter_dataset` to drop: it is made of
    aioloader's own nodes, none of which runs the user's code (a map may return None, as a
    filter leaves a hole, and a flat map leaves holes where an element gave fewer), over
    sources that hold no None (aioloader's own file sources, or sequences checked for one)."""
    from aioloader._dataset.flat_mapping import FlatMapMapDataset
    from aioloader._dataset.mapping import ElementwiseMapDataset
    from aioloader._dataset.sources import SourceMapDataset

    return any(
        isinstance(node, ElementwiseMapDataset | FlatMapMapDataset)
        or (isinstance(node, SourceMapDataset) and _may_give_none(node.data_source))
        or not type(node).__module__.startswith("aioloader.")
        for node in graph(dataset)
    )


_CHECKED_SEQUENCE = 1 << 20  # a longer list is not scanned for None: it may hold one


def _may_give_none(source: Any) -> bool:
    """False for a source that never gives None: one of aioloader's file sources, or a
    list or tuple (or an `InMemoryDataSource`) without a None in it."""
    from aioloader._sources.protocols import InMemoryDataSource

    if isinstance(source, range):
        return False
    if isinstance(source, InMemoryDataSource):
        source = source.elements()
    elif type(source).__module__.startswith("aioloader._sources."):
        return False  # a range, ArrayRecord, Parquet, files, tables: ints, bytes or rows
    if isinstance(source, list | tuple) and len(source) <= _CHECKED_SEQUENCE:
        return any(element is None for element in source)
    return True


class PassNone:
    """`function(x)`, but a None (a hole kept by `allow_nones=True`) passes untouched, as
    in Grain; a module-level class, so that it pickles for subinterpreters."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def __call__(self, element: Any, *rest: Any) -> Any:
        return None if element is None else self.function(element, *rest)


def _require_read_options(value: Any) -> ReadOptions:
    """aioloader's ReadOptions, or Grain's (anything with its two fields), or None."""
    if value is None:
        return ReadOptions()
    if isinstance(value, ReadOptions):
        return value
    if hasattr(value, "num_threads") and hasattr(value, "prefetch_buffer_size"):
        # Grain's prefetch_buffer_size=0 (no read-ahead) reads one record ahead here.
        return ReadOptions(value.num_threads, max(1, value.prefetch_buffer_size))
    raise TypeError(f"`read_options` must be a ReadOptions or None, got {value!r}.")
