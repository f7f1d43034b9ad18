"""`RepeatIterDataset` and `RebatchIterDataset` of `grain.experimental`.

Against Grain 0.2.18 where it is installed (the GIL build of CPython 3.11; elsewhere
those tests skip): the same elements, dtypes and trees for the same pipelines
(aioloader's with 0 and 2 workers, and with `mp_prefetch`), the same epochs of random
transformations, the same errors for bad arguments and inconsistent batches. On every
build: a fresh iterator given `get_state()` after any number of elements gives exactly
the rest, with any worker count; states of other pipelines, bad arguments and parents
that fail mid-way are errors with their own type, naming what is wrong; an empty parent
repeated without end ends; a `close()` from another thread stops an endless repeat.
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader.experimental import LimitIterDataset, RebatchIterDataset, RepeatIterDataset
from tests.support.datasets import (
    BadArgument,
    assert_refuses_state,
    async_halves,
    draw,
    odd,
    refused_by_name,
    state_after,
)
from tests.support.outputs import assert_same
from tests.support.transforms import Boom, explode_at

M = aioloader.MapDataset
Build = Callable[[Any], Any]  # given a namespace of classes (aioloader's or Grain's), a dataset

MINE = SimpleNamespace(
    MapDataset=aioloader.MapDataset,
    RepeatIterDataset=RepeatIterDataset,
    RebatchIterDataset=RebatchIterDataset,
)

Pair = collections.namedtuple("Pair", "left right")


def grains(grain: ModuleType) -> SimpleNamespace:
    return SimpleNamespace(
        MapDataset=grain.MapDataset,
        RepeatIterDataset=grain.experimental.RepeatIterDataset,
        RebatchIterDataset=grain.experimental.RebatchIterDataset,
    )


def runs_of(build: Build, workers: tuple[int, ...] = (0, 2)) -> list[Any]:
    """aioloader's dataset with each worker count, and with `mp_prefetch`."""
    runs = [build(MINE).prefetch(count) for count in workers]
    runs.append(build(MINE).mp_prefetch(aioloader.MultiprocessingOptions(num_workers=2)))
    return runs


def compare_iter(grain: ModuleType, build: Build, count: int | None = None) -> list[Any]:
    """aioloader's elements (the first `count`, for an endless one) equal Grain's."""
    theirs = list(itertools.islice(build(grains(grain)), count))
    for run in runs_of(build):
        assert_same(list(itertools.islice(run, count)), theirs, repr(run)[:200])
    return theirs


def tree(x: int) -> dict[str, Any]:
    """A nested element: its batches are nested dicts, a named tuple and a None."""
    return {
        "image": {"pixels": np.full((2, 3), x, np.uint8), "mean": np.float32(x) / 2},
        "label": Pair(x, np.full(2, x, np.int32)),
        "none": None,
    }


def jitter(batch: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return batch * 1000 + rng.integers(1000, size=batch.shape)


def batched(g: Any, n: int, size: int, **kwargs: Any) -> Any:
    """`range(n)` as nested trees, in batches of `size` (read in order)."""
    return g.MapDataset.range(n).map(tree).to_iter_dataset().batch(size, **kwargs)


# Against Grain.


PIPELINES: dict[str, Build] = {
    "rebatch to larger": lambda g: g.RebatchIterDataset(batched(g, 10, 2), 4),
    "rebatch to smaller": lambda g: g.RebatchIterDataset(batched(g, 10, 4), 3),
    "rebatch to the same": lambda g: g.RebatchIterDataset(batched(g, 10, 3), 3),
    "rebatch uneven": lambda g: g.RebatchIterDataset(batched(g, 11, 3), 4),
    "rebatch to 1": lambda g: g.RebatchIterDataset(batched(g, 5, 2), 1),
    "rebatch larger than everything": lambda g: g.RebatchIterDataset(batched(g, 7, 2), 50),
    "rebatch to larger, drop_remainder": lambda g: g.RebatchIterDataset(batched(g, 10, 2), 4, True),
    "rebatch to smaller, drop_remainder": lambda g: g.RebatchIterDataset(
        batched(g, 10, 4), 3, drop_remainder=True
    ),
    "rebatch, drop_remainder, even": lambda g: g.RebatchIterDataset(
        batched(g, 12, 4), 6, drop_remainder=True
    ),
    "rebatch of scalars": lambda g: g.RebatchIterDataset(
        g.MapDataset.range(10).to_iter_dataset().batch(4), 3
    ),
    "rebatch of a batch's short last": lambda g: g.RebatchIterDataset(
        g.MapDataset.range(10).to_iter_dataset().batch(4, drop_remainder=False), 5
    ),
    "rebatch after filter and batch": lambda g: g.RebatchIterDataset(
        g.MapDataset.range(40).to_iter_dataset().filter(odd).map(tree).batch(3), 5
    ),
    "rebatch of a MapDataset's batches": lambda g: g.RebatchIterDataset(
        g.MapDataset.range(10).shuffle(seed=3).batch(3), 2
    ),
    "rebatch of arrays whose dtype changes": lambda g: g.RebatchIterDataset(
        g.MapDataset.source(
            [np.arange(4, dtype=np.int32), np.arange(3, dtype=np.float16), np.ones((2,), np.uint8)]
        ).to_iter_dataset(),
        3,
    ),
    "rebatch of lists, tuples and ordered dicts": lambda g: g.RebatchIterDataset(
        g.MapDataset.source(
            [
                [np.arange(3), (np.arange(3.0), collections.OrderedDict(z=np.ones(3), a=np.zeros(3)))]
                for _ in range(3)
            ]
        ).to_iter_dataset(),
        4,
    ),
    "rebatch then map": lambda g: g.RebatchIterDataset(
        g.MapDataset.range(9).to_iter_dataset().batch(2), 4
    ).map(lambda b: b * 10),
    "rebatch of a rebatch": lambda g: g.RebatchIterDataset(
        g.RebatchIterDataset(g.MapDataset.range(17).to_iter_dataset().batch(5), 3), 7
    ),
    "repeat 1 epoch": lambda g: g.RepeatIterDataset(g.MapDataset.range(5).to_iter_dataset(), 1),
    "repeat 3 epochs": lambda g: g.RepeatIterDataset(g.MapDataset.range(5).to_iter_dataset(), num_epochs=3),
    "repeat a MapDataset": lambda g: g.RepeatIterDataset(g.MapDataset.range(4).shuffle(seed=2), 2),
    "repeat after filter and batch": lambda g: g.RepeatIterDataset(
        g.MapDataset.range(20).to_iter_dataset().filter(odd).batch(3), 2
    ),
    "repeat after random_map: epochs alike": lambda g: g.RepeatIterDataset(
        g.MapDataset.range(4).to_iter_dataset().random_map(draw, seed=5), 3
    ),
    "repeat after seed and shuffle": lambda g: g.RepeatIterDataset(
        g.MapDataset.range(6).seed(4).shuffle().to_iter_dataset(), 2
    ),
    "repeat then random_map": lambda g: g.RepeatIterDataset(
        g.MapDataset.range(4).to_iter_dataset(), 3
    ).random_map(draw, seed=1),
    "repeat then map and batch": lambda g: (
        g.RepeatIterDataset(g.MapDataset.range(5).to_iter_dataset(), 3).map(tree).batch(4)
    ),
    "repeat then rebatch, across epochs": lambda g: g.RebatchIterDataset(
        g.RepeatIterDataset(g.MapDataset.range(5).to_iter_dataset().batch(2), 3), 4
    ),
    "rebatch then repeat": lambda g: g.RepeatIterDataset(
        g.RebatchIterDataset(batched(g, 7, 3), 2, drop_remainder=True), 2
    ),
    "repeat of a repeat": lambda g: g.RepeatIterDataset(
        g.RepeatIterDataset(g.MapDataset.range(3).to_iter_dataset(), 2), 2
    ),
    "repeat of an empty parent": lambda g: g.RepeatIterDataset(
        g.MapDataset.range(5).to_iter_dataset().filter(lambda x: x > 9), 4
    ),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_equals_grains(grain: ModuleType, name: str) -> None:
    compare_iter(grain, PIPELINES[name])


ENDLESS: dict[str, Build] = {
    "range": lambda g: g.RepeatIterDataset(g.MapDataset.range(4).to_iter_dataset()),
    "after random_map": lambda g: g.RepeatIterDataset(
        g.MapDataset.range(3).seed(9).to_iter_dataset().random_map(draw), None
    ),
    "then random_map and rebatch": lambda g: g.RebatchIterDataset(
        g.RepeatIterDataset(g.MapDataset.range(5).to_iter_dataset().batch(2)).random_map(jitter, seed=3), 3
    ),
}


@pytest.mark.parametrize("name", sorted(ENDLESS))
def test_an_endless_repeat_equals_grains(grain: ModuleType, name: str) -> None:
    assert len(compare_iter(grain, ENDLESS[name], count=23)) == 23


def test_epochs_of_a_random_map_draw_alike_as_in_grain(grain: ModuleType) -> None:
    def build(g: Any) -> Any:
        return g.RepeatIterDataset(g.MapDataset.range(5).to_iter_dataset().random_map(draw, seed=1), 3)

    out = compare_iter(grain, build)
    assert out[:5] == out[5:10] == out[10:]


def test_a_rebatch_output_of_one_parent_batch_is_a_slice_of_it_as_in_grain(grain: ModuleType) -> None:
    def build(g: Any) -> Any:
        return g.RebatchIterDataset(g.MapDataset.range(8).to_iter_dataset().batch(4), 2)

    for ds in (build(MINE), build(grains(grain))):
        assert all(out.base is not None for out in ds)


def test_dict_kinds_and_key_orders_are_grains(grain: ModuleType) -> None:
    # `assert_same` compares dicts by key: here their types and orders too.
    rows = np.arange(3)
    elements = [
        {"b": rows, "a": {"z": rows, "y": rows}},
        collections.OrderedDict(b=rows, a=rows),
        collections.defaultdict(list, b=rows, a=rows),
    ]

    def build(g: Any, element: Any) -> Any:
        return g.RebatchIterDataset(g.MapDataset.source([element] * 2).to_iter_dataset(), 4)

    for element in elements:
        theirs, mine = list(build(grains(grain), element)), list(build(MINE, element))
        assert_same(mine, theirs)
        for a, b in zip(mine, theirs, strict=True):
            assert (type(a), list(a)) == (type(b), list(b))
            assert getattr(a, "default_factory", None) is getattr(b, "default_factory", None)
        assert list(mine[0].get("a", {})) == list(theirs[0].get("a", {}))


def run(make: Callable[[], Any]) -> tuple[list[Any], BaseException | None]:
    """The elements before the error, and the error (None at the end)."""
    out: list[Any] = []
    try:
        out.extend(make())
    except Exception as error:
        return out, error
    return out, None


INCONSISTENT: dict[str, list[Any]] = {
    "an empty first batch": [np.zeros((0, 3)), np.ones((4, 3))],
    "an empty batch later": [np.ones((3, 2)), np.zeros((0, 2)), np.ones((1, 2))],
    "trailing shapes that differ": [np.zeros((1, 3)), np.zeros((2, 4))],
    # Where a batch of another tree joins an output, Grain's rows misalign: none here.
    "fewer leaves later": [{"a": np.arange(4), "b": np.arange(4)}, {"a": np.arange(3)}],
    "an integer": [np.arange(3), 5],
}


@pytest.mark.parametrize("name", sorted(INCONSISTENT))
def test_inconsistent_batches_are_grains_errors_after_the_same_outputs(grain: ModuleType, name: str) -> None:
    elements = INCONSISTENT[name]

    def build(g: Any) -> Any:
        return g.RebatchIterDataset(g.MapDataset.source(elements).to_iter_dataset(), 4)

    theirs, their_error = run(lambda: build(grains(grain)))
    assert their_error is not None
    for ds in (build(MINE), build(MINE).prefetch(2)):
        mine, error = run(lambda ds=ds: ds)
        assert type(error) is type(their_error), (error, their_error)
        assert_same(mine, theirs)
    if "empty" in name:
        assert str(error) == str(their_error)


def test_repeat_and_rebatch_refuse_what_grain_refuses(grain: ModuleType) -> None:
    g = grains(grain)
    cases: list[Callable[[Any], Any]] = [
        lambda m: m.RepeatIterDataset(m.MapDataset.range(3).to_iter_dataset(), 0),
        lambda m: m.RepeatIterDataset(m.MapDataset.range(3).to_iter_dataset(), num_epochs=-1),
        lambda m: m.RepeatIterDataset(m.MapDataset.range(3).to_iter_dataset(), "2"),
        lambda m: m.RebatchIterDataset(m.MapDataset.range(3).to_iter_dataset(), 0),
        lambda m: m.RebatchIterDataset(m.MapDataset.range(3).to_iter_dataset(), -1),
        lambda m: m.RebatchIterDataset(m.MapDataset.range(3).to_iter_dataset(), None),
        lambda m: m.RebatchIterDataset(m.MapDataset.range(3).to_iter_dataset(), "2"),
    ]
    for case in cases:
        with pytest.raises((TypeError, ValueError)) as theirs:
            case(g)
        with pytest.raises(type(theirs.value)):
            case(MINE)


# Checkpoints (every build).


def resume_all(ds: Any, count: int | None = None, workers: tuple[int, int] = (0, 2)) -> list[Any]:
    """After every k elements (0 to the end, or to `count`): the state, as JSON, taken with
    one worker count and given to a fresh iterator with the other, gives exactly the rest."""
    full = list(itertools.islice(ds, count))
    for k in range(len(full) + 1):
        for before, after in (workers, workers[::-1]):
            iterator = iter(ds.prefetch(before))
            taken = list(itertools.islice(iterator, k))
            state = json.dumps(iterator.get_state())
            iterator.close()
            fresh = iter(ds.prefetch(after))
            fresh.set_state(state)
            rest = list(itertools.islice(fresh, None if count is None else count - k))
            fresh.close()
            assert_same(taken + rest, full, f"resumed after {k} with {before} then {after} workers")
    return full


RESUMED: dict[str, Callable[[], Any]] = {
    "rebatch to smaller: mid-batch states": lambda: RebatchIterDataset(batched(MINE, 10, 4), 3),
    "rebatch to larger": lambda: RebatchIterDataset(batched(MINE, 10, 3), 4),
    "rebatch to 1": lambda: RebatchIterDataset(M.range(7).to_iter_dataset().batch(3), 1),
    "rebatch, drop_remainder": lambda: RebatchIterDataset(batched(MINE, 11, 4), 3, drop_remainder=True),
    "rebatch after filter and batch": lambda: RebatchIterDataset(
        M.range(30).to_iter_dataset().filter(odd).batch(4), 3
    ),
    "rebatch of a MapDataset's batches": lambda: RebatchIterDataset(M.range(9).batch(4), 3),
    "repeat 1 epoch": lambda: RepeatIterDataset(M.range(4).to_iter_dataset(), 1),
    "repeat 3 epochs": lambda: RepeatIterDataset(M.range(4).to_iter_dataset(), 3),
    "repeat after filter": lambda: RepeatIterDataset(M.range(12).to_iter_dataset().filter(odd), 2),
    "repeat after random_map": lambda: RepeatIterDataset(
        M.range(3).to_iter_dataset().random_map(draw, seed=2), 3
    ),
    "repeat then random_map": lambda: RepeatIterDataset(M.range(3).to_iter_dataset(), 3).random_map(
        draw, seed=2
    ),
    "repeat then rebatch: states across epochs": lambda: RebatchIterDataset(
        RepeatIterDataset(M.range(5).to_iter_dataset().batch(2), 2), 4
    ),
    "rebatch then repeat": lambda: RepeatIterDataset(RebatchIterDataset(M.range(7).batch(3), 2), 2),
    "repeat of a limit": lambda: RepeatIterDataset(LimitIterDataset(M.range(9).to_iter_dataset(), 3), 2),
}


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_a_fresh_iterator_given_the_state_gives_exactly_the_rest(name: str) -> None:
    assert resume_all(RESUMED[name]())


@pytest.mark.parametrize("batch", [1, 3])
def test_an_endless_repeat_resumes_exactly(batch: int) -> None:
    ds = RebatchIterDataset(RepeatIterDataset(M.range(5).to_iter_dataset().batch(2)), batch)
    assert len(resume_all(ds, count=13)) == 13
    assert len(resume_all(RepeatIterDataset(M.range(3).to_iter_dataset().map(tree)), count=10)) == 10


def test_a_state_taken_at_the_end_resumes_to_nothing() -> None:
    pipelines = [
        RepeatIterDataset(M.range(3).to_iter_dataset(), 2),
        RebatchIterDataset(M.range(8).to_iter_dataset().batch(4), 2),
        RebatchIterDataset(M.range(9).to_iter_dataset().batch(4), 2, drop_remainder=True),
        RepeatIterDataset(M.range(3).to_iter_dataset().filter(lambda x: x > 5)),
    ]
    for ds in pipelines:
        iterator = iter(ds)
        list(iterator)
        fresh = iter(ds)
        fresh.set_state(iterator.get_state())
        assert list(fresh) == []


def test_a_repeat_state_resumes_with_another_num_epochs_as_in_grain() -> None:
    parent = M.range(3).to_iter_dataset()
    iterator = iter(RepeatIterDataset(parent, 2))
    assert list(itertools.islice(iterator, 4)) == [0, 1, 2, 0]
    state = iterator.get_state()
    longer = iter(RepeatIterDataset(parent, 3))
    longer.set_state(state)
    assert list(longer) == [1, 2, 0, 1, 2]
    shorter = iter(RepeatIterDataset(parent, 1))
    shorter.set_state(state)
    assert list(shorter) == []


def test_a_rebatch_state_resumes_with_another_batch_size_as_in_grain() -> None:
    parent = M.range(10).to_iter_dataset().batch(4)
    iterator = iter(RebatchIterDataset(parent, 3))
    assert next(iterator).tolist() == [0, 1, 2]
    fresh = iter(RebatchIterDataset(parent, 5))
    fresh.set_state(iterator.get_state())
    assert [b.tolist() for b in fresh] == [[3, 4, 5, 6, 7], [8, 9]]


def test_async_iteration_gives_the_same_elements_and_state() -> None:
    ds = RebatchIterDataset(RepeatIterDataset(M.range(5).to_iter_dataset().batch(2), 2), 3).prefetch(2)

    first, rest = async_halves(ds)
    assert_same(first + rest, list(ds))


# States of other pipelines.


OTHER_STATES = [
    ("a repeat into a rebatch", RepeatIterDataset(M.range(5), 2), RebatchIterDataset(M.range(5).batch(2), 2)),
    ("a rebatch into a repeat", RebatchIterDataset(M.range(5).batch(2), 2), RepeatIterDataset(M.range(5), 2)),
    ("a repeat into a limit", RepeatIterDataset(M.range(5), 2), LimitIterDataset(M.range(5), 3)),
    ("a plain part into a repeat", M.range(5).to_iter_dataset(), RepeatIterDataset(M.range(5), 2)),
    ("a rebatch into a plain part", RebatchIterDataset(M.range(5).batch(2), 1), M.range(5).batch(2)),
    (
        "a repeat of one range into one of another",
        RepeatIterDataset(M.range(5), 2),
        RepeatIterDataset(M.range(6), 2),
    ),
    (
        "a rebatch mid-batch into one of smaller batches",
        RebatchIterDataset(M.range(8).batch(4), 3),
        RebatchIterDataset(M.range(8).batch(2).to_iter_dataset(), 3),
    ),
]


@pytest.mark.parametrize(("label", "source", "target"), OTHER_STATES, ids=[c[0] for c in OTHER_STATES])
def test_a_state_of_another_pipeline_is_a_value_error(label: str, source: Any, target: Any) -> None:
    assert_refuses_state(source, target)


def test_a_damaged_state_is_a_value_error() -> None:
    repeated, rebatched = RepeatIterDataset(M.range(5), 2), RebatchIterDataset(M.range(5).batch(2), 3)
    repeat_state, rebatch_state = state_after(repeated, 1), state_after(rebatched, 1)
    damaged = [
        (repeated, {**repeat_state, "dataset": {**repeat_state["dataset"], "epoch": -1}}),
        (repeated, {**repeat_state, "dataset": {**repeat_state["dataset"], "epoch": "1"}}),
        (repeated, {"version": 1, "dataset": {"stage": "repeat", "epoch": 0}}),
        (rebatched, {**rebatch_state, "dataset": {**rebatch_state["dataset"], "given": True}}),
        (rebatched, {**rebatch_state, "dataset": {**rebatch_state["dataset"], "given": 7}}),
        (rebatched, {"version": 1, "dataset": {"stage": "rebatch", "given": 0}}),
    ]
    for ds, state in damaged:
        iterator = iter(ds)
        with pytest.raises(ValueError, match="state"):
            iterator.set_state(state)
        iterator.close()


# Bad arguments and inconsistent batches.


def parent() -> Any:
    return M.range(6).to_iter_dataset().batch(2)


BAD_ARGUMENTS: list[BadArgument] = [
    (lambda: RepeatIterDataset(parent(), 0), ValueError, r"`num_epochs` must be greater"),
    (lambda: RepeatIterDataset(parent(), -3), ValueError, r"`num_epochs` must be greater"),
    (lambda: RepeatIterDataset(parent(), True), TypeError, r"`num_epochs` must be an int"),
    (lambda: RepeatIterDataset(parent(), 2.0), TypeError, r"`num_epochs` must be an int"),
    (lambda: RepeatIterDataset(parent(), "2"), TypeError, r"`num_epochs` must be an int"),
    (lambda: RepeatIterDataset([1, 2], 2), TypeError, r"`parent` must be an IterDataset"),
    (lambda: RebatchIterDataset(parent(), 0), ValueError, r"`batch_size` must be greater"),
    (lambda: RebatchIterDataset(parent(), -1), ValueError, r"`batch_size` must be greater"),
    (lambda: RebatchIterDataset(parent(), None), TypeError, r"`batch_size` must be an int"),
    (lambda: RebatchIterDataset(parent(), True), TypeError, r"`batch_size` must be an int"),
    (lambda: RebatchIterDataset(parent(), 2.0), TypeError, r"`batch_size` must be an int"),
    (lambda: RebatchIterDataset(parent(), 2, "yes"), TypeError, r"`drop_remainder` must be a bool"),
    (lambda: RebatchIterDataset(parent(), 2, None), TypeError, r"`drop_remainder` must be a bool"),
    (lambda: RebatchIterDataset("batches", 2), TypeError, r"`parent` must be an IterDataset"),
    (lambda: RebatchIterDataset(parent().device_put(), 2), ValueError, r"`device_put` must be the last"),
    (lambda: RepeatIterDataset(parent().device_put(), 2), ValueError, r"`device_put` must be the last"),
]


test_a_bad_argument_is_an_error_naming_it = refused_by_name(BAD_ARGUMENTS)


def test_numpy_arguments_and_a_map_dataset_parent_are_taken() -> None:
    assert list(RepeatIterDataset(M.range(2), np.int64(2))) == [0, 1, 0, 1]
    out = list(RebatchIterDataset(M.range(5).batch(2), np.int32(4), np.bool_(True)))
    assert [b.tolist() for b in out] == [[0, 1, 2, 3]]
    source = M.range(4)
    assert RepeatIterDataset(source, 2).parents == (source,)
    batches = source.batch(2)
    assert RebatchIterDataset(batches, 2).parents == (batches,)
    assert isinstance(RebatchIterDataset(source.batch(2), 2), aioloader.IterDataset)


REFUSED_BATCHES: list[tuple[list[Any], type[Exception], str]] = [
    ([{"a": np.arange(4), "b": np.arange(3)}], ValueError, r"leaf \['b'\] has 3, leaf \['a'\] has 4"),
    ([{"a": np.arange(2)}, {"b": np.arange(2)}], ValueError, r"batch 1 has another tree"),
    ([(np.arange(2), np.int64(3))], TypeError, r"leaf \[1\] of the parent's batch 0 has no leading"),
    ([{}], ValueError, r"no arrays to rebatch"),
]


@pytest.mark.parametrize(
    ("elements", "kind", "message"), REFUSED_BATCHES, ids=[c[2] for c in REFUSED_BATCHES]
)
def test_batches_grain_would_misalign_are_errors_naming_the_leaf(
    elements: list[Any], kind: type[Exception], message: str
) -> None:
    with pytest.raises(kind, match=message):
        list(RebatchIterDataset(M.source(elements).to_iter_dataset(), 4))


# Hostile parents and closes.


class Counting(aioloader.IterDataset[int]):
    """A Grain-style IterDataset whose iterator gives 0, 1, ... up to `end`, then raises
    `error` if given; counts the iterators made."""

    def __init__(self, end: int, error: type[Exception] | None = None) -> None:
        super().__init__()
        self.end, self.error, self.made = end, error, 0

    def __iter__(self) -> Any:
        self.made += 1
        return CountingIterator(self.end, self.error)


class CountingIterator:
    def __init__(self, end: int, error: type[Exception] | None) -> None:
        self.next, self.end, self.error = 0, end, error

    def __next__(self) -> int:
        if self.next >= self.end:
            if self.error is not None:
                raise self.error(f"element {self.next}")
            raise StopIteration
        self.next += 1
        return self.next - 1

    def get_state(self) -> dict[str, int]:
        return {"next": self.next}

    def set_state(self, state: dict[str, int]) -> None:
        self.next = state["next"]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_parent_that_fails_mid_way_raises_its_own_error_after_the_elements_before(workers: int) -> None:
    repeated = RepeatIterDataset(M.range(6).map(explode_at(4)).to_iter_dataset(), 3).prefetch(workers)
    out, error = run(lambda: repeated)
    assert out == [0, 1, 2, 3]
    assert isinstance(error, Boom)
    rebatched = RebatchIterDataset(M.range(10).map(explode_at(7)).to_iter_dataset().batch(2), 3)
    out, error = run(lambda: rebatched.prefetch(workers))
    assert [b.tolist() for b in out] == [[0, 1, 2], [3, 4, 5]]
    assert isinstance(error, Boom)
    in_order = RepeatIterDataset(Counting(2, KeyError), 3).prefetch(workers)
    out, error = run(lambda: in_order)
    assert out == [0, 1]
    assert isinstance(error, KeyError)
    assert any("epoch 0" in n for n in getattr(error, "__notes__", []))


def test_each_epoch_reads_the_parent_anew() -> None:
    parent = Counting(3)
    assert list(RepeatIterDataset(parent, 4)) == [0, 1, 2] * 4
    assert parent.made == 4


def with_deadline(work: Callable[[], Any], seconds: float = 30) -> Any:
    """`work()` in a thread, which must end within `seconds` (a hang fails, not stalls)."""
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "still running"
    return found[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_an_empty_parent_repeated_without_end_ends(workers: int) -> None:
    # Grain's never returns: every epoch ends at once, and it starts the next.
    empty = M.range(5).to_iter_dataset().filter(lambda x: x > 9)
    assert with_deadline(lambda: list(RepeatIterDataset(empty).prefetch(workers))) == []
    assert with_deadline(lambda: list(RepeatIterDataset(Counting(0)))) == []
    assert with_deadline(lambda: list(RebatchIterDataset(RepeatIterDataset(M.range(0).batch(2)), 3))) == []


@pytest.mark.parametrize("parent_size", [1, 50])
@pytest.mark.parametrize("workers", [0, 2])
def test_close_from_another_thread_stops_an_endless_repeat(parent_size: int, workers: int) -> None:
    # A parent of 1 element starts an epoch at every element: the close lands during swaps too.
    for ds in (
        RepeatIterDataset(M.range(parent_size).to_iter_dataset().map(tree)).prefetch(workers),
        RebatchIterDataset(RepeatIterDataset(M.range(parent_size).to_iter_dataset().batch(2)), 3),
        RepeatIterDataset(Counting(parent_size)),
    ):
        iterator = iter(ds)
        started = threading.Event()

        def consume(iterator: Any = iterator, started: threading.Event = started) -> int:
            count = 0
            for _ in iterator:
                count += 1
                if count == 20:
                    started.set()
            return count

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        assert started.wait(30)
        iterator.close()
        thread.join(30)
        assert not thread.is_alive(), f"{ds!r:.100} ran on after close()"
