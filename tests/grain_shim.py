"""Grain 0.2.18's modules as aioloader's public names, for running Grain's own test files.

`test_grain_own_tests.py` rewrites the imports of a Grain test file so that each module
named here is `module(name)`: the names Grain's tests use, bound to aioloader's public
API (Grain's classes become the methods and classes a user writes: `MapMapDataset(ds, f)`
is `ds.map(f)`). Any other name is `Missing`: using it is an AttributeError saying it is
not mapped (a private name of Grain's, or one aioloader leaves out). No behaviour is faked.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable
from typing import Any

import aioloader as al
import aioloader.experimental as ex


def _maps(kind: str) -> dict[str, Any]:
    def build(method: str) -> Callable[..., Any]:
        def node(parent: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(parent, method)(*args, **kwargs)

        return node

    def random(parent: Any, transform: Any, seed: Any = None, *args: Any, **kwargs: Any) -> Any:
        return parent.random_map(transform, *args, seed=seed, **kwargs)

    return {
        f"Map{kind}": build("map"),
        f"RandomMap{kind}": random,
        f"MapWithIndex{kind}": build("map_with_index"),
        f"Filter{kind}": build("filter"),
    }


def _batch(parent: Any, batch_size: int, drop_remainder: bool = False, batch_fn: Any = None) -> Any:
    return parent.batch(batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)


def _grains_make_batch(values: Any, **kwargs: Any) -> Any:
    from grain._src.python.dataset.transformations.batch import make_batch

    return make_batch(values, **kwargs)


def _grains_tree_lib() -> types.ModuleType:
    from grain._src.core import tree_lib

    return tree_lib


def _mixed(parents: Any, proportions: Any = None, selection_map: Any = None) -> Any:
    if selection_map is not None:
        return al.MapDataset.select_from_datasets(parents, selection_map)
    return al.MapDataset.mix(parents, proportions)


def _prefetch(parent: Any, *, read_options: Any = None, allow_nones: bool = False) -> Any:
    return parent.to_iter_dataset(read_options, allow_nones=allow_nones)


def _repeat(parent: Any, num_epochs: Any = None, *, reseed_each_epoch: bool = True) -> Any:
    return parent.repeat(num_epochs, reseed_each_epoch=reseed_each_epoch)


_PY = "grain._src.python"
_TRANSFORMATIONS = f"{_PY}.dataset.transformations"
_TRANSFORMS = {
    "Map": al.transforms.Map,
    "MapTransform": al.MapTransform,
    "RandomMap": al.transforms.RandomMap,
    "RandomMapTransform": al.RandomMapTransform,
    "TfRandomMap": al.transforms.TfRandomMap,
    "Filter": al.transforms.Filter,
    "FilterTransform": al.FilterTransform,
    "MapWithIndex": al.transforms.MapWithIndex,
    "MapWithIndexTransform": al.MapWithIndexTransform,
    "FlatMap": al.FlatMapTransform,
    "FlatMapTransform": al.FlatMapTransform,
    "Batch": al.Batch,
    "DatasetSelectionMap": al.DatasetSelectionMap,
}

NAMES: dict[str, Callable[[], dict[str, Any]]] = {
    "grain.python": lambda: {name: getattr(al, name) for name in al.__all__} | {"experimental": ex},
    "grain._src.core.transforms": lambda: _TRANSFORMS,
    "grain._src.core.sharding": lambda: {
        "ShardOptions": al.ShardOptions,
        "NoSharding": al.NoSharding,
        "ShardByJaxProcess": al.ShardByJaxProcess,
    },
    f"{_PY}.options": lambda: {
        "ReadOptions": al.ReadOptions,
        "MultiprocessingOptions": al.MultiprocessingOptions,
    },
    f"{_PY}.record": lambda: {"Record": al.Record, "RecordMetadata": al.RecordMetadata},
    f"{_PY}.samplers": lambda: {
        "IndexSampler": al.IndexSampler,
        "SequentialSampler": al.SequentialSampler,
        "Sampler": al.Sampler,
    },
    f"{_PY}.data_sources": lambda: {
        "RangeDataSource": al.RangeDataSource,
        "ArrayRecordDataSource": al.sources.ArrayRecordDataSource,
        "SharedMemoryDataSource": al.sources.SharedMemoryDataSource,
        "InMemoryDataSource": al.InMemoryDataSource,
        "RandomAccessDataSource": al.RandomAccessDataSource,
    },
    f"{_PY}.data_loader": lambda: {
        "DataLoader": al.DataLoader,
        "DataLoaderIterator": al.DataLoaderIterator,
        "PyGrainDatasetIterator": al.PyGrainDatasetIterator,
    },
    f"{_PY}.load": lambda: {"load": al.load},
    f"{_PY}.operations": lambda: {
        "MapOperation": al.MapOperation,
        "RandomMapOperation": al.RandomMapOperation,
        "FilterOperation": al.FilterOperation,
        "BatchOperation": al.BatchOperation,
    },
    f"{_PY}.testing.experimental": lambda: {
        "assert_equal_output_after_checkpoint": ex.assert_equal_output_after_checkpoint
    },
    f"{_PY}.dataset.base": lambda: {
        "ShapeDtypeStruct": ex.ShapeDtypeStruct,
        "ShapeDtypeStructProtocol": ex.ShapeDtypeStructProtocol,
        "DatasetOptions": ex.DatasetOptions,
        "ExecutionTrackingMode": ex.ExecutionTrackingMode,
        "DatasetSelectionMap": al.DatasetSelectionMap,
        "RandomAccessDataSource": al.RandomAccessDataSource,
    },
    f"{_PY}.dataset.dataset": lambda: {
        "MapDataset": al.MapDataset,
        "IterDataset": al.IterDataset,
        "DatasetIterator": al.DatasetIterator,
        "get_element_spec": ex.get_element_spec,
        "get_next_index": ex.get_next_index,
        "set_next_index": ex.set_next_index,
        "apply_transformations": ex.apply_transformations,
        "WithOptionsIterDataset": ex.WithOptionsIterDataset,
    },
    f"{_PY}.dataset.sources.parquet_dataset": lambda: {"ParquetIterDataset": ex.ParquetIterDataset},
    f"{_TRANSFORMATIONS}.batch": lambda: {
        "BatchMapDataset": _batch,
        "BatchIterDataset": _batch,
        "batch_and_pad": ex.batch_and_pad,
        "BatchFn": object,  # Grain's protocol of a `batch_fn`: here any callable
        "tree_lib": _grains_tree_lib(),  # which its tests reload, with JAX and without
        # Grain's stacking, which its tests' own `batch_fn`s call: the user's code there.
        "make_batch": _grains_make_batch,
    },
    f"{_TRANSFORMATIONS}.cache": lambda: {"CacheIterDataset": ex.CacheIterDataset},
    f"{_TRANSFORMATIONS}.filter": lambda: (
        {k: v for k, v in _maps("MapDataset").items() if "Filter" in k}
        | {k: v for k, v in _maps("IterDataset").items() if "Filter" in k}
    ),
    f"{_TRANSFORMATIONS}.flatmap": lambda: {
        "FlatMapMapDataset": ex.FlatMapMapDataset,
        "FlatMapIterDataset": ex.FlatMapIterDataset,
    },
    f"{_TRANSFORMATIONS}.interleave": lambda: {"InterleaveIterDataset": ex.InterleaveIterDataset},
    f"{_TRANSFORMATIONS}.limit": lambda: {"LimitIterDataset": ex.LimitIterDataset},
    f"{_TRANSFORMATIONS}.map": lambda: (
        {k: v for k, v in _maps("MapDataset").items() if "Filter" not in k}
        | {k: v for k, v in _maps("IterDataset").items() if "Filter" not in k}
    ),
    f"{_TRANSFORMATIONS}.mix": lambda: {
        "MixedMapDataset": _mixed,
        "MixedIterDataset": lambda parents, proportions=None: al.IterDataset.mix(parents, proportions),
        "ConcatenateMapDataset": al.MapDataset.concatenate,
    },
    f"{_TRANSFORMATIONS}.packing": lambda: {
        "FirstFitPackIterDataset": ex.FirstFitPackIterDataset,
        "BestFitPackIterDataset": ex.BestFitPackIterDataset,
    },
    f"{_TRANSFORMATIONS}.packing_concat_then_split": lambda: {
        "ConcatThenSplitIterDataset": ex.ConcatThenSplitIterDataset,
        "BOSHandling": ex.BOSHandling,
    },
    f"{_TRANSFORMATIONS}.prefetch": lambda: {
        "PrefetchIterDataset": _prefetch,
        "ThreadPrefetchIterDataset": ex.ThreadPrefetchIterDataset,
        "multithread_prefetch": ex.multithread_prefetch,
    },
    f"{_TRANSFORMATIONS}.rebatch": lambda: {"RebatchIterDataset": ex.RebatchIterDataset},
    f"{_TRANSFORMATIONS}.repeat": lambda: {
        "RepeatMapDataset": _repeat,
        "RepeatIterDataset": ex.RepeatIterDataset,
    },
    f"{_TRANSFORMATIONS}.shuffle": lambda: {
        "ShuffleMapDataset": lambda parent, *, seed=None: parent.shuffle(seed),
        "WindowShuffleMapDataset": ex.WindowShuffleMapDataset,
        "WindowShuffleIterDataset": ex.WindowShuffleIterDataset,
    },
    f"{_TRANSFORMATIONS}.slice": lambda: {"SliceMapDataset": lambda parent, sl: parent.slice(sl)},
    f"{_TRANSFORMATIONS}.source": lambda: {
        "SourceMapDataset": al.MapDataset.source,
        "RangeMapDataset": lambda start=0, stop=None, step=1: al.MapDataset.range(start, stop, step),
    },
    f"{_TRANSFORMATIONS}.zip": lambda: {
        "ZipMapDataset": ex.ZipMapDataset,
        "ZipIterDataset": ex.ZipIterDataset,
    },
}


def module(name: str) -> types.ModuleType:
    """Grain's module `name`, holding aioloader's public names for its own (none, for a
    module of Grain's that aioloader has no counterpart of: its stats, its processes).

    A real module, found by `_Finder`: Grain's tests `importlib.reload` some of theirs."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
    return importlib.import_module(_PREFIX + name.replace(".", "__"))


_PREFIX = "grain_shim__"


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and fills the modules `module` names."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname.startswith(_PREFIX) else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, shim: types.ModuleType) -> None:
        name = shim.__name__.removeprefix(_PREFIX).replace("__", ".")
        shim.__dict__.update(NAMES[name]() if name in NAMES else {})

        def missing(attribute: str) -> Missing:
            if attribute.startswith("__"):
                raise AttributeError(attribute)
            return Missing(f"{name}.{attribute}")

        shim.__getattr__ = missing  # type: ignore[method-assign]


class Missing:
    """A name of Grain's that aioloader has no counterpart of. Naming it works (a test file
    may name it in an annotation, at import); using it is an AttributeError saying so."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(f"{self._name} is not mapped to aioloader (private to Grain, or left out)")

    __call__ = _fail

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return self._fail()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return self._fail()
