"""`IterDataset` against Grain 0.2.18's: the same pipeline gives the same elements, in order.

to_iter_dataset (holes dropped), map / filter / batch (in a parallel part and in order
after a mix), random maps where Grain's index is the record's, seeds derived by `seed()`,
mixes by list and by name, window shuffles, interleaves, and the three packers with
their options. aioloader runs every pipeline with 0 and 2 workers. After a resume, the
rest equals Grain's elements after the same number of outputs.

Grain installs on the GIL build of CPython 3.11 only; elsewhere these tests are skipped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.support.outputs import assert_same

grain = pytest.importorskip("grain", reason="Grain 0.2.18 is installed on the GIL build of CPython 3.11 only")
experimental = grain.experimental

# Given a module (aioloader, or Grain's with aioloader's names), a dataset.
Build = Callable[[Any], Any]


class GrainNames:
    """Grain's classes under aioloader's top-level names (the experimental ones included)."""

    MapDataset = grain.MapDataset
    IterDataset = grain.IterDataset
    WindowShuffleIterDataset = experimental.WindowShuffleIterDataset
    InterleaveIterDataset = experimental.InterleaveIterDataset
    FirstFitPackIterDataset = experimental.FirstFitPackIterDataset
    BestFitPackIterDataset = experimental.BestFitPackIterDataset
    ConcatThenSplitIterDataset = experimental.ConcatThenSplitIterDataset
    BOSHandling = experimental.BOSHandling


def grain_elements(build: Build, limit: int) -> list[Any]:
    return list(itertools.islice(iter(build(GrainNames)), limit))


def compare(build: Build, limit: int = 400, workers: tuple[int, ...] = (0, 2)) -> list[Any]:
    """aioloader's elements equal Grain's (the first `limit`), with each worker count."""
    theirs = grain_elements(build, limit)
    assert theirs, "the pipeline gives nothing"
    for count in workers:
        mine = list(itertools.islice(iter(build(al).prefetch(count)), limit))
        assert len(mine) == len(theirs), count
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert_same(a, b, f"element {i} with {count} workers")
    return theirs


def draw(x: Any, rng: np.random.Generator) -> tuple[Any, int]:
    return x, int(rng.integers(1 << 40))


def tokens(seed: int, count: int, longest: int = 12) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "inputs": rng.integers(1, 1000, rng.integers(1, longest + 1)).astype(np.int32),
            "targets": rng.integers(1, 1000, rng.integers(1, longest + 1)).astype(np.int32),
        }
        for _ in range(count)
    ]


def odd(x: int) -> bool:
    return x % 2 == 1


def with_nested_meta(element: dict[str, Any]) -> dict[str, Any]:
    """A nested meta feature beside the sequences: a scalar and a dict holding a sequence."""
    mask = {"bits": (np.arange(len(element["targets"])) % 2).astype(np.int8)}
    return {**element, "meta": {"id": np.int32(len(element["inputs"])), "mask": mask}}


PIPELINES: dict[str, Build] = {
    "range": lambda m: m.MapDataset.range(50).to_iter_dataset(),
    "holes dropped": lambda m: m.MapDataset.range(60).filter(odd).shuffle(seed=3).to_iter_dataset(),
    "map filter batch": lambda m: (
        m.MapDataset.range(100).to_iter_dataset().map(lambda x: x * 3).filter(odd).batch(7)
    ),
    "batch drop remainder": lambda m: m.MapDataset.range(100).to_iter_dataset().batch(7, drop_remainder=True),
    "batch_fn": lambda m: m.MapDataset.range(30).to_iter_dataset().batch(4, batch_fn=tuple),
    "dict batches": lambda m: (
        m.MapDataset.source(tokens(0, 40, 4))
        .to_iter_dataset()
        .map(lambda e: {"n": len(e["inputs"]), "first": e["inputs"][0]})
        .batch(6)
    ),
    "maps after the batch": lambda m: (
        m.MapDataset.range(90).to_iter_dataset().batch(4).map(lambda b: b.sum()).filter(odd)
    ),
    "repeat forever": lambda m: m.MapDataset.range(70).shuffle(seed=1).repeat().to_iter_dataset().batch(5),
    "random map": lambda m: m.MapDataset.range(40).to_iter_dataset().random_map(draw, seed=9),
    "random map after a filter": lambda m: (
        m.MapDataset.range(40).to_iter_dataset().filter(odd).random_map(draw, seed=7)
    ),
    "random map after a MapDataset filter": lambda m: (
        m.MapDataset.range(40).filter(odd).to_iter_dataset().random_map(draw, seed=7)
    ),
    "random map after a filter and a batch": lambda m: (
        m.MapDataset.range(40).to_iter_dataset().filter(odd).batch(3).random_map(draw, seed=7)
    ),
    "None leaves": lambda m: (
        m.MapDataset.range(20).to_iter_dataset().map(lambda x: {"x": x, "none": None}).batch(6)
    ),
    "random map after a batch": lambda m: (
        m.MapDataset.range(40).to_iter_dataset().batch(3).random_map(draw, seed=2)
    ),
    "seeds derived": lambda m: (
        m.MapDataset.range(40).seed(11).shuffle().to_iter_dataset().random_map(draw).map(str).random_map(draw)
    ),
    "second batch, in order": lambda m: m.MapDataset.range(50).to_iter_dataset().batch(2).batch(3),
    "mix": lambda m: m.IterDataset.mix(
        [
            m.MapDataset.range(30).to_iter_dataset(),
            m.MapDataset.range(100, 180).to_iter_dataset().filter(odd),
        ],
        [0.3, 0.7],
    ),
    "mix by name": lambda m: m.IterDataset.mix(
        {"b": m.MapDataset.range(100, 150).to_iter_dataset(), "a": m.MapDataset.range(20).to_iter_dataset()},
        {"b": 1.0, "a": 2.5},
    ),
    "mix of three, equal": lambda m: m.IterDataset.mix(
        [m.MapDataset.range(s, s + 20).to_iter_dataset() for s in (0, 100, 200)]
    ),
    "after a mix, in order": lambda m: (
        m.IterDataset.mix(
            [m.MapDataset.range(40).to_iter_dataset(), m.MapDataset.range(100, 140).to_iter_dataset()], [1, 2]
        )
        .map(lambda x: x + 1)
        .filter(odd)
        .random_map(draw, seed=4)
        .batch(3)
    ),
    "window shuffle": lambda m: m.WindowShuffleIterDataset(
        m.MapDataset.range(103).to_iter_dataset(), window_size=10, seed=42
    ),
    "window shuffle of batches": lambda m: m.WindowShuffleIterDataset(
        m.MapDataset.range(50).to_iter_dataset().batch(3), window_size=4, seed=0
    ),
    "interleave": lambda m: m.InterleaveIterDataset(
        [m.MapDataset.range(s, s + n) for s, n in [(0, 3), (10, 1), (20, 6), (30, 4), (40, 2)]],
        cycle_length=2,
    ),
    "interleave of IterDatasets": lambda m: m.InterleaveIterDataset(
        [m.MapDataset.range(s, s + 9).to_iter_dataset().batch(2) for s in (0, 100, 200)], cycle_length=5
    ),
    "interleave of a MapDataset of datasets": lambda m: m.InterleaveIterDataset(
        m.MapDataset.range(4).map(lambda s: m.MapDataset.range(10 * s, 10 * s + s + 1)), cycle_length=3
    ),
    "first-fit": lambda m: m.FirstFitPackIterDataset(
        m.MapDataset.source(tokens(1, 120)).to_iter_dataset(),
        length_struct={"inputs": 24, "targets": 20},
        num_packing_bins=4,
        seed=5,
    ),
    "first-fit, options": lambda m: m.FirstFitPackIterDataset(
        m.MapDataset.source(tokens(2, 120)).to_iter_dataset(),
        length_struct={"inputs": 24, "targets": 20},
        num_packing_bins=3,
        shuffle_bins_group_by_feature="inputs_segment_ids",
        pack_alignment_struct={"inputs": 4, "targets": 1},
        padding_struct={"inputs": 0, "targets": -1},
        max_sequences_per_bin=3,
    ),
    "best-fit": lambda m: m.BestFitPackIterDataset(
        m.MapDataset.source(tokens(3, 120)).to_iter_dataset(),
        length_struct={"inputs": 24, "targets": 20},
        num_packing_bins=5,
        shuffle_bins=False,
    ),
    "first-fit, nested meta feature": lambda m: m.FirstFitPackIterDataset(
        m.MapDataset.source(tokens(8, 60)).to_iter_dataset().map(with_nested_meta),
        length_struct={"inputs": 24, "targets": 20, "meta": {"id": 5, "mask": {"bits": 20}}},
        num_packing_bins=3,
        meta_features=["meta"],
        seed=2,
    ),
    "best-fit, nested meta feature": lambda m: m.BestFitPackIterDataset(
        m.MapDataset.source(tokens(9, 60)).to_iter_dataset().map(with_nested_meta),
        length_struct={"inputs": 24, "targets": 20, "meta": {"id": 5, "mask": {"bits": 20}}},
        num_packing_bins=3,
        meta_features=["meta"],
        shuffle_bins=False,
    ),
    "concat-then-split": lambda m: m.ConcatThenSplitIterDataset(
        m.MapDataset.source(tokens(4, 80)).to_iter_dataset().map(lambda e: {"inputs": e["inputs"]}),
        length_struct={"inputs": 16},
    ),
    "concat-then-split, BOS": lambda m: m.ConcatThenSplitIterDataset(
        m.MapDataset.source(tokens(5, 80)).to_iter_dataset().map(lambda e: {"inputs": e["inputs"]}),
        length_struct={"inputs": 10},
        bos_handling=m.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
        bos_features=["inputs"],
        bos_token_id=1,
    ),
    "mix, pack, batch": lambda m: m.FirstFitPackIterDataset(
        m.IterDataset.mix(
            [m.MapDataset.source(tokens(seed, 90)).to_iter_dataset() for seed in (6, 7)],
            [3, 1],
        ),
        length_struct={"inputs": 32, "targets": 32},
        num_packing_bins=2,
    ).batch(2),
}


@pytest.mark.parametrize("build", PIPELINES.values(), ids=PIPELINES.keys())
def test_elements_equal_grains(build: Build) -> None:
    compare(build)


@pytest.mark.parametrize(
    "name",
    [
        "map filter batch",
        "mix",
        "window shuffle",
        "interleave",
        "first-fit",
        "best-fit, nested meta feature",
        "concat-then-split",
    ],
)
def test_after_a_resume_the_rest_equals_grains_rest(name: str) -> None:
    build = PIPELINES[name]
    theirs = grain_elements(build, 10_000)
    for k in (1, len(theirs) // 3, len(theirs) - 1):
        iterator = iter(build(al).prefetch(1))
        for _ in range(k):
            next(iterator)
        state = iterator.get_state()
        iterator.close()
        resumed = iter(build(al).prefetch(2))
        resumed.set_state(state)
        rest = list(resumed)
        assert len(rest) == len(theirs) - k
        for i, (a, b) in enumerate(zip(rest, theirs[k:], strict=True)):
            assert_same(a, b, f"element {k + i} after resuming at {k}")


def test_grains_transform_objects_work_in_an_iter_dataset() -> None:
    class Triple(grain.transforms.Map):
        def map(self, x: int) -> int:
            return 3 * x

    class Odd(grain.transforms.Filter):
        def filter(self, x: tuple[int, int]) -> bool:
            return x[1] % 2 == 1

    class Draw(grain.transforms.RandomMap):
        def random_map(self, x: int, rng: np.random.Generator) -> Any:
            return draw(x, rng)

    def build(m: Any) -> Any:
        return m.MapDataset.range(30).to_iter_dataset().map(Triple()).random_map(Draw(), seed=1).filter(Odd())

    compare(build)


def test_grains_read_options_are_accepted() -> None:
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=0)
    assert list(al.MapDataset.range(5).to_iter_dataset(options)) == [0, 1, 2, 3, 4]


def test_grains_multiprocessing_options_mean_threads() -> None:
    ds = al.MapDataset.range(20).to_iter_dataset().map(lambda x: x + 1)
    assert list(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))) == list(range(1, 21))


def test_grains_deprecated_prefetch_takes_its_keyword() -> None:
    options = grain.MultiprocessingOptions(num_workers=2)
    ds = al.MapDataset.range(20).to_iter_dataset().map(lambda x: x + 1)
    expected = list(grain.MapDataset.range(20).to_iter_dataset().map(lambda x: x + 1))
    assert list(ds.prefetch(multiprocessing_options=options)) == expected
    assert list(ds.prefetch(options)) == list(ds.prefetch(2)) == expected
    with pytest.raises(TypeError, match="takes one of `worker_count` and `multiprocessing_options`"):
        ds.prefetch(2, multiprocessing_options=options)
    with pytest.raises(TypeError, match="takes one of"):
        ds.prefetch()


def custom_pipeline(g: Any) -> tuple[Any, Any]:
    """Grain's documented custom dataset pattern, written against module `g`: an IterDataset
    subclass whose iterator subclasses DatasetIterator(parent) and uses `self._parent`, and
    a MapDataset subclass over `self._parent`; then one of Grain's own nodes after each."""

    class PlusOneIterator(g.DatasetIterator):  # type: ignore[misc,name-defined]
        def __init__(self, parent: Any) -> None:
            super().__init__(parent)

        def __next__(self) -> int:
            return int(next(self._parent)) + 1

        def get_state(self) -> Any:
            return self._parent.get_state()

        def set_state(self, state: Any) -> None:
            self._parent.set_state(state)

    class PlusOne(g.IterDataset):  # type: ignore[misc,name-defined]
        def __init__(self, parent: Any) -> None:
            super().__init__(parent)

        def __iter__(self) -> Any:
            return PlusOneIterator(self._parent.__iter__())

    class Doubled(g.MapDataset):  # type: ignore[misc,name-defined]
        def __init__(self, parent: Any) -> None:
            super().__init__(parent)

        def __len__(self) -> int:
            return len(self._parent)

        def __getitem__(self, index: Any) -> Any:
            return self._parent[index] * 2

    shuffled = g.MapDataset.range(12).shuffle(seed=5)
    return PlusOne(shuffled.to_iter_dataset()).map(lambda x: x * 10), Doubled(shuffled).map(lambda x: x + 1)


def test_grains_custom_dataset_and_iterator_subclasses_work_as_in_grain() -> None:
    mine_iter, mine_map = custom_pipeline(al)
    theirs_iter, theirs_map = custom_pipeline(grain)
    assert list(mine_map) == list(theirs_map)
    assert mine_map[3] == theirs_map[3]
    assert list(mine_iter) == list(theirs_iter)
    mine, theirs = iter(mine_iter), iter(theirs_iter)
    assert [next(mine) for _ in range(4)] == [next(theirs) for _ in range(4)]
    state = mine.get_state()
    rest = list(mine)
    assert rest == list(theirs)
    mine.set_state(state)
    assert list(mine) == rest  # the user's get_state/set_state reach the parent's
    again = iter(custom_pipeline(al)[0])
    again.set_state(state)
    assert list(again) == rest


def test_a_custom_iterator_without_its_methods_is_a_clear_error() -> None:
    class Lazy(al.DatasetIterator):  # type: ignore[type-arg]
        pass

    parent = iter(al.MapDataset.range(3).to_iter_dataset())
    lazy = Lazy(parent)
    assert lazy._parent is parent
    with pytest.raises(TypeError, match="Lazy must define `__next__`"):
        next(lazy)
    with pytest.raises(TypeError, match="Lazy must define `get_state`"):
        lazy.get_state()
    with pytest.raises(TypeError, match="Lazy must define `set_state`"):
        lazy.set_state({})
    with pytest.raises(AttributeError, match="`_parent` is for an iterator of one parent; this one has 2"):
        _ = Lazy([parent, parent])._parent
    lazy.close()  # closes the parent
    assert list(parent) == []
