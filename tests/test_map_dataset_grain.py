"""`MapDataset` against Grain 0.2.18's: the same pipeline gives the same elements, over
several epochs (shuffle orders, slices, repeats, random draws, filter holes, batches, mix
order, seeds derived by `seed()`), and Grain's transform objects are accepted.

Grain installs on the GIL build of CPython 3.11 only; elsewhere these tests are skipped.
Grain is read by index (`ds[i]`), never iterated, so none of its threads start.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from aioloader import MapDataset
from tests.support.outputs import assert_same

grain = pytest.importorskip("grain", reason="Grain 0.2.18 is installed on the GIL build of CPython 3.11 only")


Build = Callable[[Any], Any]  # given a MapDataset class (aioloader's or Grain's), a dataset


def compare(build: Build, epochs: int = 3) -> None:
    mine, theirs = build(MapDataset), build(grain.MapDataset)
    assert len(mine) == len(theirs)
    count = min(len(theirs) * epochs, 3000)
    indices = list(range(count))
    for i in indices:
        assert_same(mine[i], theirs[i], f"element {i}")
    assert [x is None for x in mine._getitems(indices)] == [theirs[i] is None for i in indices]


def draw(x: Any, rng: np.random.Generator) -> tuple[Any, int, float]:
    return x, int(rng.integers(1 << 40)), float(rng.normal())


PIPELINES: dict[str, Build] = {
    "range": lambda M: M.range(3, 40, 4),
    "range-down": lambda M: M.range(40, 3, -7),
    "source-repeat": lambda M: M.source([f"r{i}" for i in range(7)]).repeat(2),
    "slices": lambda M: M.range(50)[3:40:3][::-2][1:],
    "slice-past-end": lambda M: M.range(10)[4:100],
    "random-map": lambda M: M.range(20).random_map(draw, seed=3),
    "random-map-seed-2-64": lambda M: M.range(5).random_map(draw, seed=2**64 + 5),
    "random-map-repeat": lambda M: M.range(6).random_map(draw, seed=9).repeat(3),
    "random-map-repeat-same": lambda M: (
        M.range(6).random_map(draw, seed=9).repeat(3, reseed_each_epoch=False)
    ),
    "seeded-chain": lambda M: M.range(10).seed(123).random_map(draw).map(lambda t: t[1]).random_map(draw),
    "seed-override": lambda M: M.range(10).seed(1).random_map(draw).seed(2).random_map(draw),
    "filter-holes": lambda M: M.range(30).map(lambda x: x * 7 % 11).filter(lambda x: x % 3 == 0),
    "batch": lambda M: M.range(11).map(lambda x: {"a": np.full(3, x, np.int16), "b": (x, x / 2)}).batch(4),
    "batch-drop": lambda M: M.range(11).batch(3, drop_remainder=True),
    "batch-fn": lambda M: M.range(11).batch(3, batch_fn=lambda xs: tuple(xs)),
    "batch-one": lambda M: M.range(5).map(lambda x: np.arange(x, x + 2)).batch(1),
    "mix-default": lambda M: M.mix([M.range(5), M.range(100, 107)]),
    "mix-floats": lambda M: M.mix([M.range(40), M.range(100, 150)], [0.3, 0.7]),
    "mix-three": lambda M: M.mix([M.range(30), M.range(100, 130), M.range(200, 230)], [0.1, 0.25, 0.65]),
    "mix-cut-fractions": lambda M: M.mix([M.range(60), M.range(100, 190)], [0.3, 0.8]),
    "mix-thirds": lambda M: M.mix([M.range(60), M.range(100, 190), M.range(200, 290)], [0.7, 1 / 3, 0.2]),
    "mix-ints": lambda M: M.mix([M.range(17), M.range(100, 113)], [3, 2]),
    "mix-of-mixes": lambda M: M.mix(
        [M.mix([M.range(9), M.range(50, 60)], [1, 3]), M.range(100, 140)], [2, 1]
    ),
    "concatenate": lambda M: M.concatenate([M.range(3), M.range(0), M.range(10, 15), M.range(20, 21)]),
    "mix-seeded-components": lambda M: M.mix(
        [M.range(20).seed(5).random_map(draw), M.range(30, 50).seed(6).random_map(draw)], [1, 2]
    ).random_map(draw),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_elements_equal_grains(name: str) -> None:
    compare(PIPELINES[name])


SHUFFLES: dict[str, Build] = {
    "one": lambda M: M.range(1).shuffle(seed=0),
    "two": lambda M: M.range(2).shuffle(seed=1),
    "seven": lambda M: M.range(7).shuffle(seed=2**32 - 1),
    "thousand": lambda M: M.range(1000).shuffle(seed=42),
    "large": lambda M: M.range(70_000).shuffle(seed=7),
    "seeded": lambda M: M.range(100).seed(3).shuffle().random_map(draw),
    "slice-shuffle-repeat": lambda M: M.range(500)[7::3].shuffle(seed=5).repeat(2),
    "shuffle-then-batch": lambda M: M.range(50).shuffle(seed=8).batch(7),
    "mix-shuffled": lambda M: M.mix(
        [M.range(40).seed(1).shuffle(), M.range(100, 160).seed(2).shuffle()], [1, 3]
    ),
}


@pytest.mark.parametrize("name", list(SHUFFLES))
def test_shuffles_equal_grains(name: str) -> None:
    compare(SHUFFLES[name])


def test_grains_transform_objects_are_accepted() -> None:
    class Plus(grain.transforms.Map):
        def map(self, element: int) -> int:
            return element + 1000

    class Even(grain.transforms.Filter):
        def filter(self, element: int) -> bool:
            return element % 2 == 0

    class Noise(grain.transforms.RandomMap):
        def random_map(self, element: int, rng: np.random.Generator) -> tuple[int, float]:
            return element, float(rng.random())

    compare(lambda M: M.range(20).map(Plus()).filter(Even()).random_map(Noise(), seed=4))
    with pytest.raises(TypeError, match=r"`transform` of `map` must be a MapTransform"):
        MapDataset.range(3).map(Even())


def test_the_seed_a_transform_derives_is_grains() -> None:
    for build in (
        lambda M: M.range(5).seed(9).map(lambda x: x).random_map(draw),
        lambda M: M.mix([M.range(5).seed(1), M.range(5).seed(2).map(lambda x: x)]).random_map(draw),
    ):
        assert build(MapDataset)._seed == build(grain.MapDataset)._rng_pool._seed


NEGATIVE: dict[str, Build] = {
    "range": lambda M: M.range(5),
    "slice": lambda M: M.range(10)[2:8],
    "batch": lambda M: M.range(10).batch(3),
    "repeat-forever": lambda M: M.range(5).repeat(None),
    "shuffle": lambda M: M.range(20).shuffle(seed=2),
    "filter": lambda M: M.range(12).filter(lambda x: x % 2 == 1),
    "mix": lambda M: M.mix([M.range(4), M.range(10, 14)]),
    "concatenate": lambda M: M.concatenate([M.range(3), M.range(5)]),
}


@pytest.mark.parametrize("name", list(NEGATIVE))
def test_negative_indices_are_grains(name: str) -> None:
    """`ds[i]` for i < 0 wraps as Grain's does (each dataset's own `index % len`: a
    shuffle's -1 is its epoch -1), down to past minus the length."""
    mine, theirs = NEGATIVE[name](MapDataset), NEGATIVE[name](grain.MapDataset)
    for index in (-1, -2, -3, -len(theirs) if len(theirs) < 10**6 else -7, -21):
        assert_same(mine[index], theirs[index], f"[{index}]")


def test_concatenate_of_no_datasets_is_empty_as_grains(grain: ModuleType) -> None:
    mine, theirs = MapDataset.concatenate([]), grain.MapDataset.concatenate([])
    assert len(mine) == len(theirs) == 0
    assert list(mine) == list(theirs) == []


# (length, index -> (dataset, index in it)): the selection maps of Grain's mix tests.
SELECTIONS: dict[str, tuple[int, Callable[[int], tuple[int, int]]]] = {
    "interleaved": (10, lambda i: (i % 2, i // 2)),
    "sequential": (10, lambda i: (i // 5, i % 5)),
    "subset-shuffled": (6, lambda i: ((0, 1, 1, 0, 1, 0)[i], (0, 0, 2, 1, 1, 3)[i])),
    "past-one-epoch": (12, lambda i: (i % 2, i)),  # reads the inputs' next epochs
}


@pytest.mark.parametrize("name", list(SELECTIONS))
def test_select_from_datasets_is_grains(grain: ModuleType, name: str) -> None:
    """Grain's `MapDataset.select_from_datasets`, given a Grain DatasetSelectionMap."""
    length, pick = SELECTIONS[name]

    class Selection(grain.transforms.DatasetSelectionMap):
        def __len__(self) -> int:
            return length

        def __getitem__(self, index: int) -> tuple[int, int]:
            if not 0 <= index < length:
                raise IndexError(f"index {index} out of range")
            return pick(index)

    def inputs(M: Any) -> list[Any]:
        return [M.range(0, 10, 2), M.range(1, 10, 2).map(lambda x: x * 100)]

    mine = MapDataset.select_from_datasets(inputs(MapDataset), Selection())
    theirs = grain.MapDataset.select_from_datasets(inputs(grain.MapDataset), Selection())
    assert len(mine) == len(theirs) == length
    assert [mine[i] for i in range(length)] == [theirs[i] for i in range(length)]
    order = list(reversed(range(length)))
    assert mine._getitems(order) == theirs._getitems(order)
    assert list(mine.to_iter_dataset()) == list(theirs.to_iter_dataset())
    assert list(mine.map(lambda x: -x)) == list(theirs.map(lambda x: -x))
    with pytest.raises(IndexError):
        mine[length]  # the map is asked for the index as given, as in Grain


def test_select_from_datasets_takes_aioloaders_own_selection_map() -> None:
    import aioloader

    class Reversed(aioloader.transforms.DatasetSelectionMap):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, index: int) -> tuple[int, int]:
            return 0, 2 - index

    assert list(MapDataset.select_from_datasets([MapDataset.range(3)], Reversed())) == [2, 1, 0]


def test_select_from_datasets_refuses_a_bad_selection_map() -> None:
    inputs = [MapDataset.range(3)]
    with pytest.raises(TypeError, match=r"`selection_map` must have `__len__` and `__getitem__`"):
        MapDataset.select_from_datasets(inputs, 3)
    with pytest.raises(IndexError, match=r"`selection_map\[0\]` selects dataset 1, but there are 1"):
        MapDataset.select_from_datasets(inputs, [(1, 0)])[0]
    with pytest.raises(TypeError, match=r"`selection_map\[0\]` must be a pair"):
        MapDataset.select_from_datasets(inputs, [0])[0]
