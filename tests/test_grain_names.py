"""Grain 0.2's other spellings: `import grain` users change that line only.

`grain.transforms.Map`, `grain.samplers.IndexSampler`, `grain.sources.RangeDataSource`,
`grain.sharding.ShardOptions`, `grain.experimental.FlatMapTransform`, `grain.load(...)`,
`ds.map_with_index`, `ds.apply`, `ds.pipe`, and Grain's own transform objects in a
`DataLoader`. The first tests need no Grain; those at the end compare with Grain 0.2.18
(installed on the GIL build of CPython 3.11 only: elsewhere they skip).
"""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.support.reference import assert_same_outputs

# What each namespace must hold: Grain's names, and aioloader's own among its sources.
NAMESPACES = {
    "transforms": {
        "Batch",
        "DatasetSelectionMap",
        "Filter",
        "Map",
        "MapWithIndex",
        "RandomMap",
        "TfRandomMap",
        "Transformation",
        "Transformations",
    },
    "samplers": {"IndexSampler", "Sampler", "SequentialSampler"},
    "sharding": {"NoSharding", "ShardByJaxProcess", "ShardOptions"},
    "sources": {
        "ArrayRecordDataSource",
        "RandomAccessDataSource",
        "RangeDataSource",
        "SharedMemoryDataSource",
    },
    "experimental": {
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
    },
}
OWN_SOURCES = {"AsyncDataSource", "FilesDataSource", "InMemoryDataSource", "ParquetDataSource"}


@pytest.mark.parametrize("name", sorted(NAMESPACES))
def test_each_namespace_holds_grains_names_as_aioloaders_objects(name: str) -> None:
    namespace = getattr(al, name)
    assert isinstance(namespace, ModuleType)
    extra = OWN_SOURCES if name == "sources" else set()
    assert set(namespace.__all__) == NAMESPACES[name] | extra
    assert namespace.__all__ == sorted(namespace.__all__)
    for public in namespace.__all__:
        value = getattr(namespace, public)
        top = getattr(al, public, None)
        if top is not None:
            assert value is top, public


# grain.python's names that aioloader leaves out, for a reason the README gives: the shared
# memory of processes.
LEFT_OUT = {"SharedMemoryArray"}


def test_every_other_name_of_grain_python_is_here(grain: ModuleType) -> None:
    import grain.python as gp

    theirs = {name for name in dir(gp) if not name.startswith("_")}
    assert {name for name in theirs if not hasattr(al, name)} == LEFT_OUT
    assert al.PyGrainDatasetIterator is al.DataLoaderIterator
    assert al.Transformations is al.transforms.Transformations
    assert al.DatasetSelectionMap is al.transforms.DatasetSelectionMap
    if importlib.util.find_spec("orbax") is not None:
        assert al.PyGrainCheckpointSave is al.checkpoint.CheckpointSave
        assert al.PyGrainCheckpointRestore is al.checkpoint.CheckpointRestore
        assert al.PyGrainCheckpointHandler is al.checkpoint.CheckpointHandler


def test_the_short_names_are_the_transform_classes() -> None:
    assert al.transforms.Map is al.MapTransform
    assert al.transforms.RandomMap is al.RandomMapTransform
    assert al.transforms.Filter is al.FilterTransform
    assert al.transforms.MapWithIndex is al.MapWithIndexTransform
    assert al.transforms.Batch is al.Batch
    assert al.sources.SharedMemoryDataSource is al.InMemoryDataSource
    assert al.experimental.FlatMapTransform is al.FlatMapTransform


def test_no_namespace_loads_with_import_aioloader_and_dir_does_not_name_them() -> None:
    code = """
        import sys
        import aioloader
        names = ("transforms", "samplers", "sharding", "sources", "experimental", "checkpoint")
        assert not [n for n in names if f"aioloader.{n}" in sys.modules], sys.modules
        assert not set(names) & set(dir(aioloader))
        assert aioloader.samplers.IndexSampler is aioloader.IndexSampler
        assert "aioloader._sources.parquet" not in sys.modules
        aioloader.sources.ParquetDataSource
        assert "aioloader._sources.parquet" in sys.modules
        print("ok")
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"module 'aioloader\.sources' has no attribute 'Nope'"):
        _ = al.sources.Nope
    with pytest.raises(AttributeError, match=r"module 'aioloader' has no attribute 'nope'"):
        _ = al.nope


# `map_with_index`.


class Tag(al.MapWithIndexTransform):
    def map_with_index(self, index: int, element: Any) -> tuple[int, Any]:
        return index, element


def tag(index: int, element: Any) -> tuple[int, Any]:
    return index, element


def test_a_map_dataset_gives_each_element_its_index_in_every_epoch() -> None:
    ds = al.MapDataset.range(10).shuffle(seed=4)
    tagged = ds.map_with_index(Tag())
    assert [tagged[i] for i in range(25)] == [(i, ds[i]) for i in range(25)]
    assert ds.map_with_index(tag)[13] == (13, ds[13])


def test_a_map_dataset_hole_stays_a_hole_and_an_error_names_the_index() -> None:
    ds = al.MapDataset.range(6).filter(lambda x: x % 2).map_with_index(tag)
    assert [ds[i] for i in range(6)] == [None, (1, 1), None, (3, 3), None, (5, 5)]

    def boom(index: int, element: int) -> int:
        raise KeyError(element)

    with pytest.raises(KeyError) as caught:
        al.MapDataset.range(6).map_with_index(boom)[4]
    assert (
        "map_with_index(test_a_map_dataset_hole_stays_a_hole_and_an_error_names_the_index.<locals>.boom)"
        in ("".join(caught.value.__notes__))
    )
    assert "index 4" in "".join(caught.value.__notes__)


def odd(x: int) -> bool:
    return x % 2 == 1


# Each: an IterDataset pipeline, and the (index, element) pairs it must give.
ITER_CASES: dict[str, tuple[Callable[[], al.IterDataset[Any]], list[Any]]] = {
    "in a part": (
        lambda: al.MapDataset.range(40).shuffle(seed=1).to_iter_dataset().map_with_index(tag),
        list(enumerate(al.MapDataset.range(40).shuffle(seed=1))),
    ),
    "after a filter": (
        lambda: al.MapDataset.range(40).to_iter_dataset().filter(odd).map_with_index(Tag()),
        list(enumerate(range(1, 40, 2))),
    ),
    "after holes": (
        lambda: al.MapDataset.range(40).filter(odd).to_iter_dataset().map_with_index(tag),
        list(enumerate(range(1, 40, 2))),
    ),
    "holes kept": (
        lambda: al.MapDataset.range(6).filter(odd).to_iter_dataset(allow_nones=True).map_with_index(tag),
        [None, (1, 1), None, (3, 3), None, (5, 5)],
    ),
    "after a batch": (
        lambda: (
            al.MapDataset.range(12).to_iter_dataset().batch(4).map_with_index(lambda i, b: (i, b.tolist()))
        ),
        [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7]), (2, [8, 9, 10, 11])],
    ),
    "after a filter and a batch": (
        lambda: (
            al.MapDataset.range(20)
            .to_iter_dataset()
            .filter(odd)
            .batch(3)
            .map_with_index(lambda i, b: (i, b.tolist()))
        ),
        [(0, [1, 3, 5]), (1, [7, 9, 11]), (2, [13, 15, 17]), (3, [19])],
    ),
}


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("case", sorted(ITER_CASES))
def test_an_iter_dataset_gives_each_element_its_count_with_any_worker_count(case: str, workers: int) -> None:
    build, expected = ITER_CASES[case]
    assert list(build().prefetch(workers)) == expected


@pytest.mark.parametrize("case", ["in a part", "after a filter"])
@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 0), (1, 3)])
def test_an_iter_dataset_resumes_with_the_next_index(case: str, before: int, after: int) -> None:
    build, expected = ITER_CASES[case]
    with iter(build().prefetch(before)) as first:
        taken = list(itertools.islice(first, 7))
        state = first.get_state()
    with iter(build().prefetch(after)) as second:
        second.set_state(state)
        assert taken + list(second) == expected


# `apply`, `pipe` and `load`.


class Twice(al.MapTransform):
    def map(self, element: int) -> int:
        return 2 * element


class NotFour(al.FilterTransform):
    def filter(self, element: int) -> bool:
        return element % 4 != 0  # of the doubled elements: keeps 2, 6, 10, ...


def test_apply_gives_each_transform_to_its_method() -> None:
    mapped = al.MapDataset.range(5).apply([Twice(), Tag(), al.Batch(2)])
    assert [(index.tolist(), element.tolist()) for index, element in mapped] == [
        ([0, 1], [0, 2]),
        ([2, 3], [4, 6]),
        ([4], [8]),
    ]
    ds = (
        al.MapDataset.range(10)
        .to_iter_dataset()
        .apply([Twice(), NotFour(), Tag(), al.Batch(2, drop_remainder=True)])
    )
    assert [(index.tolist(), element.tolist()) for index, element in ds] == [
        ([0, 1], [2, 6]),
        ([2, 3], [10, 14]),
    ]
    assert list(al.MapDataset.range(10).apply(Twice()))[:3] == [0, 2, 4]


def test_apply_makes_a_flat_map_dataset_and_refuses_what_nothing_takes() -> None:
    class Spread(al.FlatMapTransform):
        max_fan_out = 2

        def flat_map(self, element: int) -> list[int]:
            return [element] * (element % 3)

    mapped = al.MapDataset.range(4).apply(Spread())
    assert isinstance(mapped, al.experimental.FlatMapMapDataset)
    assert [mapped[i] for i in range(len(mapped))] == [None, None, 1, None, 2, 2, None, None]
    iterated = al.MapDataset.range(4).to_iter_dataset().apply([Spread()])
    assert isinstance(iterated, al.experimental.FlatMapIterDataset)
    assert list(iterated) == [1, 2, 2]
    with pytest.raises(NotImplementedError, match="Transformation type: 'nope' is not supported"):
        al.MapDataset.range(3).apply(["nope"])


def test_pipe_calls_the_function_with_the_dataset_first() -> None:
    shifted = al.MapDataset.range(5).pipe(
        lambda d, by, *, times: d.map(lambda x: (x + by) * times), 10, times=2
    )
    assert list(shifted) == [20, 22, 24, 26, 28]
    piped = al.MapDataset.range(30).to_iter_dataset().pipe(al.WindowShuffleIterDataset, window_size=5, seed=3)
    assert sorted(piped) == list(range(30))


@pytest.mark.parametrize("workers", [0, 2])
def test_load_is_a_data_loader_of_an_index_sampler(workers: int) -> None:
    source = al.RangeDataSource(0, 23, 1)
    loaded = al.load(
        source,
        num_epochs=2,
        shuffle=True,
        seed=9,
        shard_options=al.ShardOptions(1, 2),
        transformations=[Twice()],
        batch_size=4,
        drop_remainder=True,
        worker_count=workers,
    )
    by_hand = al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(23, al.ShardOptions(1, 2), shuffle=True, num_epochs=2, seed=9),
        operations=[Twice(), al.Batch(4, drop_remainder=True)],
    )
    mine, expected = [b.tolist() for b in loaded], [b.tolist() for b in by_hand]
    assert mine == expected
    assert len(mine) == 5  # 12 records of the shard, twice, in batches of 4


def test_a_data_loader_refuses_a_map_with_index_as_grains_does() -> None:
    with pytest.raises(TypeError, match=r"`operations\[1\]` is a MapWithIndexTransform, which a DataLoader"):
        al.DataLoader(
            data_source=al.RangeDataSource(0, 3, 1),
            sampler=al.IndexSampler(3, num_epochs=1),
            operations=[Twice(), Tag()],
        )


# Against Grain 0.2.18.


def grain_module() -> ModuleType:
    return pytest.importorskip(
        "grain", reason="Grain 0.2.18 is installed on the GIL build of CPython 3.11 only"
    )


@pytest.mark.parametrize("name", sorted(NAMESPACES))
def test_every_name_is_grains_name_in_the_same_namespace(name: str) -> None:
    grain = grain_module()
    theirs = {n for n in dir(getattr(grain, name)) if not n.startswith("_")}
    assert NAMESPACES[name] <= theirs


def grain_pipelines(g: Any) -> dict[str, Any]:
    """Pipelines written once over `g`, `import grain` or `import aioloader as grain`."""

    class AddIndex(g.experimental.MapWithIndexTransform):  # type: ignore[misc]
        def map_with_index(self, index: int, element: Any) -> Any:
            return element * 1000 + index

    class Plus(g.transforms.Map):  # type: ignore[misc]
        def map(self, element: Any) -> Any:
            return element + 7

    class Keep(g.transforms.Filter):  # type: ignore[misc]
        def filter(self, element: Any) -> Any:
            return element % 3  # truthy, as Grain users write it

    source = g.MapDataset.range(60).seed(5).shuffle()
    return {
        "map with index": source.map_with_index(AddIndex()).repeat(2),
        "apply": source.apply([Plus(), AddIndex(), g.transforms.Batch(4)]),
        "iter filter, index": source.to_iter_dataset().filter(Keep()).map_with_index(AddIndex()),
        "iter apply": source.to_iter_dataset().apply([Keep(), Plus(), g.transforms.Batch(5), AddIndex()]),
    }


@pytest.mark.parametrize("name", ["map with index", "apply", "iter filter, index", "iter apply"])
def test_a_dataset_pipeline_written_for_grain_gives_grains_elements(name: str) -> None:
    grain = grain_module()
    theirs = list(grain_pipelines(grain)[name])
    for workers in (0, 2):
        ds = grain_pipelines(al)[name]
        mine = list(ds.prefetch(workers) if isinstance(ds, al.IterDataset) else ds)
        assert theirs
        assert_same_outputs(mine, theirs)


def test_load_gives_grains_batches() -> None:
    grain = grain_module()

    def batches(g: Any) -> list[Any]:
        class Plus(g.transforms.Map):  # type: ignore[misc]
            def map(self, element: Any) -> Any:
                return element + 7

        loader = g.load(
            g.sources.RangeDataSource(0, 50, 1),
            num_epochs=2,
            shuffle=True,
            seed=11,
            shard_options=g.sharding.ShardOptions(0, 3),
            transformations=[Plus()],
            batch_size=6,
        )
        return [b.tolist() for b in loader]

    assert batches(al) == batches(grain)


def test_a_data_loader_takes_grains_own_transform_objects() -> None:
    grain = grain_module()

    class Plus(grain.transforms.Map):  # type: ignore[misc]
        def map(self, element: Any) -> Any:
            return element + 7

    class Draw(grain.transforms.RandomMap):  # type: ignore[misc]
        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return element * 100 + int(rng.integers(100))

    def run(g: Any, **workers: Any) -> list[Any]:
        loader = g.DataLoader(
            data_source=g.sources.RangeDataSource(0, 30, 1),
            sampler=g.samplers.IndexSampler(30, shuffle=True, seed=2, num_epochs=1),
            operations=[Plus(), Draw(), grain.transforms.Batch(4)],
            **workers,
        )
        return [b.tolist() for b in loader]

    theirs = run(grain)
    assert run(al) == theirs
    assert run(al, worker_count=2) == theirs


class PlusDraw(al.transforms.TfRandomMap):
    def np_random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return element * 100 + int(rng.integers(100))


class SameDraw(al.RandomMapTransform):
    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return element * 100 + int(rng.integers(100))


def draws(g: Any, transform: Any, **workers: Any) -> list[Any]:
    loader = g.DataLoader(
        data_source=g.sources.RangeDataSource(0, 30, 1),
        sampler=g.samplers.IndexSampler(30, shuffle=True, seed=5, num_epochs=1),
        operations=[transform, g.transforms.Batch(4)],
        **workers,
    )
    return [b.tolist() for b in loader]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_tf_random_map_runs_in_a_data_loader_with_the_records_generator(workers: int) -> None:
    """Grain's `TfRandomMap` (`np_random_map`) is a random map to a DataLoader; the Dataset
    API's `apply` refuses it with NotImplementedError, as Grain's does."""
    assert draws(al, PlusDraw(), worker_count=workers) == draws(al, SameDraw())
    with pytest.raises(NotImplementedError, match="not supported by `apply`"):
        al.MapDataset.range(10).apply(PlusDraw())
    with pytest.raises(TypeError, match=r"`operations\[0\]` .*instance"):
        al.DataLoader(data_source=[1], sampler=al.SequentialSampler(1), operations=[PlusDraw])


def test_grains_tf_random_map_gives_grains_batches(grain: ModuleType) -> None:
    class GrainDraw(grain.transforms.TfRandomMap):  # type: ignore[misc]
        def np_random_map(self, element: Any, rng: np.random.Generator) -> Any:
            return element * 100 + int(rng.integers(100))

    theirs = draws(grain, GrainDraw())
    assert draws(al, GrainDraw()) == theirs
    assert draws(al, PlusDraw(), worker_count=2) == theirs


def test_record_version_and_the_spec_protocol() -> None:
    import tomllib
    import typing

    record = al.Record(metadata=al.RecordMetadata(3, record_key=7), data={"x": 1})
    assert (record.metadata.index, record.metadata.record_key, record.data) == (3, 7, {"x": 1})
    assert record == al.Record(record.metadata, {"x": 1})
    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert al.__version__ == pyproject["project"]["version"]
    protocol = al.experimental.ShapeDtypeStructProtocol
    assert typing.Protocol in protocol.__mro__
    assert {"shape", "dtype"} <= set(dir(protocol))
    # Runtime-checkable, as Grain's: `isinstance` tells specs' leaves from other values.
    assert isinstance(np.zeros((2, 3), np.float32), protocol)
    assert isinstance(al.experimental.ShapeDtypeStruct((2,), np.int32), protocol)
    assert not isinstance(3, protocol)
