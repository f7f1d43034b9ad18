"""`get_element_spec(ds)` and `ShapeDtypeStruct` (Grain's experimental element specs).

Against Grain 0.2.18 where it is installed (the GIL build of CPython 3.11; elsewhere
those tests skip): the same spec for the same pipeline, from a range through slice,
shuffle, repeat, filter, seed, map with `output_spec`, batch (with and without
`drop_remainder`), `to_iter_dataset`, prefetches, mixes, zips, limit, rebatch and the
rest; the same error type where Grain cannot say (a source of records, a map without
`output_spec`, a custom `batch_fn`, a flat map, a packer); and a user's own dataset
class with `_element_spec` asked first. On every build: the spec's fields and
equality, batch and rebatch through nested structures, and the errors' messages.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import pytest

import aioloader
from aioloader._dataset.element_spec import ShapeDtypeStruct, get_element_spec

Build = Callable[[Any], Any]  # given a namespace of classes (aioloader's or Grain's), a dataset

MINE = SimpleNamespace(
    MapDataset=aioloader.MapDataset,
    IterDataset=aioloader.IterDataset,
    x=aioloader.experimental,
    Map=aioloader.transforms.Map,
    Options=aioloader.MultiprocessingOptions,
    get_element_spec=get_element_spec,
)


def grains(grain: ModuleType) -> SimpleNamespace:
    return SimpleNamespace(
        MapDataset=grain.MapDataset,
        IterDataset=grain.IterDataset,
        x=grain.experimental,
        Map=grain.transforms.Map,
        Options=grain.MultiprocessingOptions,
        get_element_spec=grain.experimental.get_element_spec,
    )


class Featurize:
    """A callable map with `output_spec`: each library's spec class comes from `input_spec`."""

    def __call__(self, x: int) -> dict[str, Any]:
        return {"id": x, "pixels": np.zeros((2, 3), np.float32), "pair": (x, [x])}

    def output_spec(self, input_spec: Any) -> dict[str, Any]:
        make = type(input_spec)
        return {
            "id": input_spec,
            "pixels": make(shape=(2, 3), dtype=np.float32),
            "pair": (input_spec, [None]),
        }


class Jitter:
    """A callable random map with `output_spec`."""

    def __call__(self, x: int, rng: np.random.Generator) -> float:
        return x + rng.random()

    def output_spec(self, input_spec: Any) -> Any:
        return type(input_spec)(shape=(), dtype=np.float64)


class Indexed:
    """A callable map with index, with `output_spec`."""

    def __call__(self, index: int, x: int) -> tuple[int, int]:
        return index, x

    def output_spec(self, input_spec: Any) -> Any:
        return (type(input_spec)(shape=(), dtype=np.int64), input_spec)


class Twice:
    """A `batch_fn` with Grain's `output_spec(input_spec, batch_size, drop_remainder)`."""

    def __call__(self, elements: list[Any]) -> Any:
        return np.stack(elements) * 2

    def output_spec(self, input_spec: Any, batch_size: int, drop_remainder: bool) -> Any:
        return ("twice", batch_size, drop_remainder)


def _keep_odd(x: Any) -> bool:
    return bool(x % 2)


def _spec_map(g: Any) -> Any:
    """A transform object of the library's own `Map` class, with `output_spec`."""

    class Halve(g.Map):
        def map(self, x: Any) -> Any:
            return x / 2

        def output_spec(self, input_spec: Any) -> Any:
            return type(input_spec)(shape=input_spec.shape, dtype=np.float64)

    return Halve()


def _iter(g: Any, n: int = 10) -> Any:
    return g.MapDataset.range(n).to_iter_dataset()


PIPELINES: dict[str, Build] = {
    "range": lambda g: g.MapDataset.range(10),
    "slice": lambda g: g.MapDataset.range(10)[2:8:2],
    "shuffle": lambda g: g.MapDataset.range(10).shuffle(seed=3),
    "repeat": lambda g: g.MapDataset.range(10).repeat(3),
    "filter": lambda g: g.MapDataset.range(10).filter(_keep_odd),
    "seed": lambda g: g.MapDataset.range(10).seed(7).shuffle(),
    "batch": lambda g: g.MapDataset.range(10).batch(3),
    "batch-drop-remainder": lambda g: g.MapDataset.range(10).batch(3, drop_remainder=True),
    "batch-of-batches": lambda g: g.MapDataset.range(10).batch(2).batch(3, drop_remainder=True),
    "batch-fn-with-output-spec": lambda g: g.MapDataset.range(10).batch(2, batch_fn=Twice()),
    "batch-fn-partial": lambda g: g.MapDataset.range(10).batch(2, batch_fn=functools.partial(Twice())),
    "map-output-spec": lambda g: g.MapDataset.range(10).map(Featurize()),
    "map-transform-object": lambda g: g.MapDataset.range(10).map(_spec_map(g)),
    "map-then-batch": lambda g: g.MapDataset.range(10).map(Featurize()).batch(4, drop_remainder=True),
    "random-map-output-spec": lambda g: g.MapDataset.range(10).random_map(Jitter(), seed=1),
    "map-with-index-output-spec": lambda g: g.MapDataset.range(10).map_with_index(Indexed()),
    "iter-random-map-output-spec": lambda g: _iter(g).random_map(Jitter(), seed=1),
    "mix": lambda g: g.MapDataset.mix([g.MapDataset.range(4), g.MapDataset.range(6)]),
    "concatenate": lambda g: g.MapDataset.concatenate([g.MapDataset.range(4), g.MapDataset.range(6)]),
    "zip-map": lambda g: g.x.ZipMapDataset(parents=[g.MapDataset.range(6), g.MapDataset.range(12).batch(2)]),
    "window-shuffle-map": lambda g: g.x.WindowShuffleMapDataset(
        g.MapDataset.range(10), window_size=3, seed=1
    ),
    "to-iter-dataset": lambda g: _iter(g),
    "iter-map-output-spec": lambda g: _iter(g).map(Featurize()),
    "iter-filter": lambda g: _iter(g).filter(_keep_odd),
    "iter-batch": lambda g: _iter(g).batch(4),
    "iter-batch-drop-remainder": lambda g: _iter(g).batch(4, drop_remainder=True),
    "iter-map-then-batch": lambda g: _iter(g).map(Featurize()).batch(3),
    "iter-seed": lambda g: _iter(g).seed(5),
    "mp-prefetch": lambda g: _iter(g).batch(2).mp_prefetch(g.Options(num_workers=2)),
    "iter-mix": lambda g: g.IterDataset.mix([_iter(g, 4), _iter(g, 6)], [0.5, 0.5]),
    "zip-iter": lambda g: g.x.ZipIterDataset(parents=[_iter(g), _iter(g).batch(2)]),
    "limit": lambda g: g.x.LimitIterDataset(_iter(g).batch(2), count=3),
    "iter-repeat": lambda g: g.x.RepeatIterDataset(_iter(g), num_epochs=2),
    "cache": lambda g: g.x.CacheIterDataset(_iter(g).map(Featurize())),
    "thread-prefetch": lambda g: g.x.ThreadPrefetchIterDataset(_iter(g), prefetch_buffer_size=2),
    "window-shuffle-iter": lambda g: g.x.WindowShuffleIterDataset(_iter(g), window_size=3, seed=1),
    "interleave": lambda g: g.x.InterleaveIterDataset([_iter(g, 3), _iter(g, 5)], cycle_length=2),
    "rebatch": lambda g: g.x.RebatchIterDataset(_iter(g).batch(2), batch_size=5),
    "rebatch-drop-remainder": lambda g: g.x.RebatchIterDataset(
        _iter(g).batch(3, drop_remainder=True), batch_size=4, drop_remainder=True
    ),
    "rebatch-tree": lambda g: g.x.RebatchIterDataset(_iter(g).map(Featurize()).batch(2), batch_size=3),
}

# Where Grain cannot say: the error type it raises, built by each library alike.
UNKNOWN: dict[str, tuple[Build, type[Exception]]] = {
    "source": (lambda g: g.MapDataset.source([1, 2, 3]), NotImplementedError),
    "source-under-a-batch": (lambda g: g.MapDataset.source([1, 2, 3]).batch(2), NotImplementedError),
    "mix-of-a-source-first": (
        lambda g: g.MapDataset.mix([g.MapDataset.source([1]), g.MapDataset.range(3)]),
        NotImplementedError,
    ),
    "map-without-output-spec": (lambda g: g.MapDataset.range(3).map(lambda x: x), ValueError),
    "random-map-without-output-spec": (
        lambda g: g.MapDataset.range(3).random_map(lambda x, rng: x, seed=1),
        ValueError,
    ),
    "map-with-index-without-output-spec": (
        lambda g: g.MapDataset.range(3).map_with_index(lambda i, x: x),
        ValueError,
    ),
    "iter-map-without-output-spec": (lambda g: _iter(g).map(lambda x: x), ValueError),
    "map-without-output-spec-over-a-source": (
        lambda g: g.MapDataset.source([1]).map(lambda x: x),
        ValueError,  # the transform is checked before the parent, as in Grain
    ),
    "custom-batch-fn": (lambda g: g.MapDataset.range(4).batch(2, batch_fn=list), NotImplementedError),
    "batch-and-pad": (
        lambda g: _iter(g).batch(4, batch_fn=functools.partial(g.x.batch_and_pad, batch_size=4)),
        NotImplementedError,
    ),
    "flat-map": (
        lambda g: g.x.FlatMapMapDataset(g.MapDataset.range(3), _split(g)),
        NotImplementedError,
    ),
    "first-fit-pack": (
        lambda g: g.x.FirstFitPackIterDataset(
            _iter(g).map(lambda x: {"t": np.arange(x % 3 + 1)}), length_struct={"t": 4}, num_packing_bins=2
        ),
        NotImplementedError,
    ),
}


def _split(g: Any) -> Any:
    class Split(g.x.FlatMapTransform):
        max_fan_out = 2

        def flat_map(self, element: Any) -> Any:
            return [element, element]

    return Split()


def normalised(spec: Any) -> Any:
    """`spec` with each `ShapeDtypeStruct` (aioloader's or Grain's) as (shape, numpy dtype)."""
    if type(spec).__name__ == "ShapeDtypeStruct":
        return ("ShapeDtypeStruct", tuple(spec.shape), np.dtype(spec.dtype))
    if isinstance(spec, dict):
        return {key: normalised(value) for key, value in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(normalised(value) for value in spec)
    return spec


@pytest.mark.parametrize("name", list(PIPELINES))
def test_the_spec_equals_grains(grain: ModuleType, name: str) -> None:
    theirs = grains(grain).get_element_spec(PIPELINES[name](grains(grain)))
    mine = get_element_spec(PIPELINES[name](MINE))
    assert normalised(mine) == normalised(theirs)
    assert repr(mine).replace("ShapeDtypeStruct", "S") == repr(theirs).replace("ShapeDtypeStruct", "S")


@pytest.mark.parametrize("name", list(UNKNOWN))
def test_an_unknown_spec_is_the_error_grain_raises(grain: ModuleType, name: str) -> None:
    build, error = UNKNOWN[name]
    with pytest.raises(error) as theirs:
        grains(grain).get_element_spec(build(grains(grain)))
    with pytest.raises(error) as mine:
        get_element_spec(build(MINE))
    assert type(mine.value) is type(theirs.value)
    if error is NotImplementedError and "is not implemented for" in str(theirs.value):
        assert str(mine.value) == str(theirs.value)  # it names the same node class


def _user_dataset(g: Any) -> Any:
    """A user's own MapDataset class that says its spec through Grain's hook."""
    spec_type = type(g.get_element_spec(g.MapDataset.range(1)))

    class Images(g.MapDataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: Any) -> Any:
            return {"image": np.zeros((2, 2), np.uint8), "label": index}

        @property
        def _element_spec(self) -> Any:
            return {"image": spec_type(shape=(2, 2), dtype=np.uint8), "label": spec_type((), np.int64)}

    return Images()


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda g, ds: ds, id="itself"),
        pytest.param(lambda g, ds: ds.batch(2, drop_remainder=True), id="batched"),
        pytest.param(lambda g, ds: ds.to_iter_dataset().batch(3), id="iter-batched"),
        pytest.param(
            lambda g, ds: g.x.RebatchIterDataset(ds.to_iter_dataset().batch(3), batch_size=2), id="rebatched"
        ),
    ],
)
def test_a_user_dataset_with_element_spec_is_asked_first(grain: ModuleType, build: Any) -> None:
    theirs = grains(grain)
    expected = theirs.get_element_spec(build(theirs, _user_dataset(theirs)))
    assert normalised(get_element_spec(build(MINE, _user_dataset(MINE)))) == normalised(expected)


def test_grains_own_transform_objects_give_their_output_spec(grain: ModuleType) -> None:
    """Grain's `Map` subclass given to aioloader's map: its `output_spec` is used."""
    halve = _spec_map(grains(grain))
    theirs = grain.experimental.get_element_spec(grain.MapDataset.range(3).map(halve))
    assert normalised(get_element_spec(aioloader.MapDataset.range(3).map(halve))) == normalised(theirs)


# On every build.


def test_shape_dtype_struct_is_a_frozen_value() -> None:
    spec = ShapeDtypeStruct(shape=(None, 3), dtype=np.float32)
    assert spec == ShapeDtypeStruct((None, 3), np.float32)
    assert hash(spec) == hash(ShapeDtypeStruct((None, 3), np.float32))
    assert (spec.shape, spec.dtype) == ((None, 3), np.float32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.shape = ()  # type: ignore[misc]


def test_range_is_int64_scalars_through_pass_through_nodes() -> None:
    ds = aioloader.MapDataset.range(10).seed(1).shuffle()[1:9].repeat(2).filter(_keep_odd)
    scalar = ShapeDtypeStruct(shape=(), dtype=np.int64)
    assert get_element_spec(ds) == scalar
    assert get_element_spec(ds.to_iter_dataset().prefetch(2)) == scalar


@pytest.mark.parametrize("drop_remainder", [True, False], ids=["drop-remainder", "keep-remainder"])
def test_batch_puts_a_leading_dimension_on_every_leaf(drop_remainder: bool) -> None:
    class Pair(NamedTuple):
        left: Any
        right: Any

    leaf = ShapeDtypeStruct(shape=(2,), dtype=np.float32)

    class Nested:
        def __call__(self, x: Any) -> Any:
            return x

        def output_spec(self, input_spec: Any) -> Any:
            ordered = collections.OrderedDict([("z", leaf), ("a", None)])
            return {"b": [leaf, Pair(input_spec, leaf)], "a": ordered}

    first = 4 if drop_remainder else None
    batched = ShapeDtypeStruct(shape=(first, 2), dtype=np.float32)
    expected = {
        "a": collections.OrderedDict([("z", batched), ("a", None)]),
        "b": [batched, Pair(ShapeDtypeStruct((first,), np.int64), batched)],
    }
    spec = get_element_spec(
        aioloader.MapDataset.range(8).map(Nested()).batch(4, drop_remainder=drop_remainder)
    )
    assert spec == expected
    assert list(spec) == ["a", "b"]  # keys sorted, as `jax.tree_util` orders them
    assert type(spec["b"][1]) is Pair
    assert type(spec["a"]) is collections.OrderedDict


def test_rebatch_keeps_each_leafs_own_type() -> None:
    @dataclasses.dataclass(frozen=True)
    class OtherSpec:  # any ShapeDtypeStruct-like class, JAX's say
        shape: tuple[int | None, ...]
        dtype: Any

    class Specced:
        def __call__(self, x: Any) -> Any:
            return x

        def output_spec(self, input_spec: Any) -> Any:
            return {"x": OtherSpec((None, 5), np.int32), "tag": "not a spec"}

    ds = aioloader.experimental.RebatchIterDataset(_iter(MINE).map(Specced()), batch_size=6)
    assert get_element_spec(ds) == {"x": OtherSpec((6, 5), np.int32), "tag": "not a spec"}


def test_errors_name_the_node_and_the_transform() -> None:
    with pytest.raises(NotImplementedError, match="not implemented for SourceMapDataset"):
        get_element_spec(aioloader.MapDataset.source([1, 2]).batch(2))
    with pytest.raises(ValueError, match=r"map\(_keep_odd\).*output_spec"):
        get_element_spec(aioloader.MapDataset.range(2).map(_keep_odd))
    with pytest.raises(NotImplementedError, match="custom batching functions"):
        get_element_spec(_iter(MINE).batch(2, batch_fn=list))


def test_an_unknown_dataset_class_is_not_implemented() -> None:
    class Opaque(aioloader.MapDataset[int]):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, index: Any) -> int:
            return 0

    with pytest.raises(NotImplementedError, match="not implemented for Opaque"):
        get_element_spec(Opaque().to_iter_dataset())


def test_an_aioloader_transform_object_gives_its_output_spec() -> None:
    ds = aioloader.MapDataset.range(3).map(_spec_map(MINE)).to_iter_dataset()
    assert get_element_spec(ds) == ShapeDtypeStruct(shape=(), dtype=np.float64)
