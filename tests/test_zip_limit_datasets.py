"""`ZipMapDataset`, `ZipIterDataset` and `LimitIterDataset` of `grain.experimental`.

Against Grain 0.2.18 where it is installed (the GIL build of CPython 3.11; elsewhere
those tests skip): the same elements for the same pipelines (aioloader's with 0 and 2
workers, and with `mp_prefetch`), the same ends (strict zips of uneven parents, limits
past the end), the same errors for bad arguments. On every build: a fresh iterator
given `get_state()` after any number of elements gives exactly the rest, with any
worker count; states of other pipelines, bad arguments and a parent that fails mid-way
are errors with their own type, naming what is wrong.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader.experimental import LimitIterDataset, ZipIterDataset, ZipMapDataset
from tests.support.datasets import (
    BadArgument,
    assert_refuses_state,
    draw,
    odd,
    refused_by_name,
    state_after,
    tenfold,
)
from tests.support.outputs import assert_same
from tests.support.transforms import Boom, explode_at

M = aioloader.MapDataset
Build = Callable[[Any], Any]  # given a namespace of classes (aioloader's or Grain's), a dataset

MINE = SimpleNamespace(
    MapDataset=aioloader.MapDataset,
    ReadOptions=aioloader.ReadOptions,
    ZipMapDataset=ZipMapDataset,
    ZipIterDataset=ZipIterDataset,
    LimitIterDataset=LimitIterDataset,
)


def grains(grain: ModuleType) -> SimpleNamespace:
    return SimpleNamespace(
        MapDataset=grain.MapDataset,
        ReadOptions=grain.ReadOptions,
        ZipMapDataset=grain.experimental.ZipMapDataset,
        ZipIterDataset=grain.experimental.ZipIterDataset,
        LimitIterDataset=grain.experimental.LimitIterDataset,
    )


def compare_iter(grain: ModuleType, build: Build, workers: tuple[int, ...] = (0, 2)) -> list[Any]:
    """aioloader's elements equal Grain's, with each worker count and with `mp_prefetch`."""
    theirs = list(build(grains(grain)))
    runs = [build(MINE).prefetch(count) for count in workers]
    runs.append(build(MINE).mp_prefetch(aioloader.MultiprocessingOptions(num_workers=2)))
    for run in runs:
        assert_same(list(run), theirs, repr(run)[:200])
    return theirs


def compare_map(grain: ModuleType, build: Build) -> None:
    """Length, `ds[i]` over three epochs and both signs, `_getitems`, and iteration equal Grain's."""
    mine, theirs = build(MINE), build(grains(grain))
    assert len(mine) == len(theirs)
    indices = list(range(-len(theirs), 3 * len(theirs)))
    for i in indices:
        try:
            expected = theirs[i]
        except Exception as error:  # a random map's negative index fails in Grain: here too
            with pytest.raises(type(error)):
                _ = mine[i]
            continue
        assert_same(mine[i], expected, f"ds[{i}]")
    later = indices[len(theirs) :: 3]
    assert_same(mine._getitems(later), list(theirs._getitems(later)), "_getitems")
    assert_same(list(mine), list(theirs), "iteration")
    assert_same(list(mine.to_iter_dataset().prefetch(2)), list(theirs), "prefetch(2)")


# ZipMapDataset against Grain.


MAP_PIPELINES: dict[str, Build] = {
    "ranges": lambda g: g.ZipMapDataset([g.MapDataset.range(0, 12), g.MapDataset.range(5, 17)]),
    "one parent": lambda g: g.ZipMapDataset([g.MapDataset.range(4)]),
    "a parent alone": lambda g: g.ZipMapDataset(g.MapDataset.range(4)),
    "after map and shuffle": lambda g: g.ZipMapDataset(
        [g.MapDataset.range(10).shuffle(seed=3), g.MapDataset.range(10).map(tenfold), g.MapDataset.range(10)]
    ),
    "after seed, shuffle and random_map": lambda g: g.ZipMapDataset(
        [g.MapDataset.range(9).seed(7).shuffle(), g.MapDataset.range(9).seed(8).random_map(draw)]
    ),
    "a filter's holes stay in the tuple": lambda g: g.ZipMapDataset(
        [g.MapDataset.range(8).filter(odd), g.MapDataset.range(8)]
    ),
    "sources of dicts": lambda g: g.ZipMapDataset(
        [g.MapDataset.source([{"a": 1}, {"b": 2}]), g.MapDataset.source(["x", "y"])]
    ),
    "then map, slice and repeat": lambda g: (
        g.ZipMapDataset([g.MapDataset.range(6), g.MapDataset.range(6, 12)]).map(sum)[1:5].repeat(2)
    ),
    "of zips": lambda g: g.ZipMapDataset(
        [g.ZipMapDataset([g.MapDataset.range(5)] * 2), g.MapDataset.range(5).shuffle(seed=1)]
    ),
}


@pytest.mark.parametrize("name", sorted(MAP_PIPELINES))
def test_zip_map_dataset_equals_grains(grain: ModuleType, name: str) -> None:
    compare_map(grain, MAP_PIPELINES[name])


def test_zip_map_dataset_then_batch_equals_grains(grain: ModuleType) -> None:
    def build(g: Any) -> Any:
        return g.ZipMapDataset([g.MapDataset.range(7), g.MapDataset.range(7).map(float)]).batch(3)

    mine, theirs = build(MINE), build(grains(grain))
    assert_same([mine[i] for i in range(len(mine))], [theirs[i] for i in range(len(theirs))], "batches")


def test_zip_map_dataset_of_empty_parents_is_empty(grain: ModuleType) -> None:
    mine = ZipMapDataset([M.range(0), M.range(0)])
    theirs = grain.experimental.ZipMapDataset([grain.MapDataset.range(0)] * 2)
    assert len(mine) == len(theirs) == 0
    assert list(mine) == list(theirs) == []


# ZipIterDataset and LimitIterDataset against Grain.


ITER_PIPELINES: dict[str, Build] = {
    "zip of to_iter_dataset": lambda g: g.ZipIterDataset(
        [
            g.MapDataset.range(20).to_iter_dataset(),
            g.MapDataset.range(3, 23).shuffle(seed=2).to_iter_dataset(),
        ]
    ),
    "zip with read options": lambda g: g.ZipIterDataset(
        [
            g.MapDataset.range(15).to_iter_dataset(g.ReadOptions(num_threads=2, prefetch_buffer_size=3)),
            g.MapDataset.range(15).map(tenfold).to_iter_dataset(g.ReadOptions(num_threads=0)),
        ]
    ),
    "zip of MapDatasets": lambda g: g.ZipIterDataset([g.MapDataset.range(6), g.MapDataset.range(6).map(str)]),
    "zip of a MapDataset and an IterDataset": lambda g: g.ZipIterDataset(
        [g.MapDataset.range(6), g.MapDataset.range(6).to_iter_dataset().map(tenfold)]
    ),
    "zip of filtered parents of one length": lambda g: g.ZipIterDataset(
        [
            g.MapDataset.range(20).to_iter_dataset().filter(odd),
            g.MapDataset.range(100, 110).to_iter_dataset(),
        ]
    ),
    "zip then map and batch": lambda g: (
        g.ZipIterDataset(
            [g.MapDataset.range(10).to_iter_dataset(), g.MapDataset.range(10).to_iter_dataset().batch(1)]
        )
        .map(lambda pair: pair[0] + int(pair[1][0]))
        .batch(4)
    ),
    "zip, not strict, ends with the shortest": lambda g: g.ZipIterDataset(
        [g.MapDataset.range(9).to_iter_dataset(), g.MapDataset.range(4).to_iter_dataset()], strict=False
    ),
    "zip of zips": lambda g: g.ZipIterDataset(
        [
            g.ZipIterDataset([g.MapDataset.range(5).to_iter_dataset()] * 2),
            g.MapDataset.range(5).to_iter_dataset(),
        ]
    ),
    "zip of a limited endless repeat": lambda g: g.ZipIterDataset(
        [
            g.LimitIterDataset(g.MapDataset.range(3).repeat().to_iter_dataset(), 7),
            g.MapDataset.range(7).to_iter_dataset(),
        ]
    ),
    "zip after seed, then random_map": lambda g: g.ZipIterDataset(
        [g.MapDataset.range(6).seed(5), g.MapDataset.range(6).to_iter_dataset()]
    ).random_map(draw),
    "limit smaller": lambda g: g.LimitIterDataset(g.MapDataset.range(10).to_iter_dataset(), 4),
    "limit equal": lambda g: g.LimitIterDataset(g.MapDataset.range(10).to_iter_dataset(), 10),
    "limit larger": lambda g: g.LimitIterDataset(g.MapDataset.range(10).to_iter_dataset(), 25),
    "limit of a MapDataset": lambda g: g.LimitIterDataset(g.MapDataset.range(10).shuffle(seed=4), 6),
    "limit after filter": lambda g: g.LimitIterDataset(
        g.MapDataset.range(50).to_iter_dataset().filter(odd), 7
    ),
    "limit over epochs": lambda g: g.LimitIterDataset(g.MapDataset.range(10).repeat(2).to_iter_dataset(), 15),
    "limit after batch": lambda g: g.LimitIterDataset(g.MapDataset.range(10).batch(3).to_iter_dataset(), 2),
    "limit then map and batch": lambda g: (
        g.LimitIterDataset(g.MapDataset.range(30).to_iter_dataset(), 11).map(tenfold).batch(4)
    ),
    "limit of a zip": lambda g: g.LimitIterDataset(
        g.ZipIterDataset([g.MapDataset.range(8).to_iter_dataset(), g.MapDataset.range(8).to_iter_dataset()]),
        5,
    ),
    "limit after seed, then random_map": lambda g: g.LimitIterDataset(
        g.MapDataset.range(9).seed(2), 5
    ).random_map(draw),
}


@pytest.mark.parametrize("name", sorted(ITER_PIPELINES))
def test_iter_pipeline_equals_grains(grain: ModuleType, name: str) -> None:
    assert compare_iter(grain, ITER_PIPELINES[name])


UNEVEN = [(3, 2), (2, 3), (3, 3, 2), (2, 2, 2, 3), (4, 1, 4)]


@pytest.mark.parametrize("lengths", UNEVEN)
def test_a_strict_zip_of_uneven_parents_fails_as_grains_after_the_same_tuples(
    grain: ModuleType, lengths: tuple[int, ...]
) -> None:
    def build(g: Any) -> Any:
        return g.ZipIterDataset([g.MapDataset.range(n).to_iter_dataset() for n in lengths])

    def run(ds: Any) -> tuple[list[Any], str]:
        out: list[Any] = []
        with pytest.raises(ValueError, match="ZipIterDataset argument") as caught:
            out.extend(ds)
        return out, str(caught.value)

    theirs = run(build(grains(grain)))
    assert run(build(MINE)) == theirs
    assert run(build(MINE).prefetch(2)) == theirs


def test_zip_and_limit_refuse_what_grain_refuses(grain: ModuleType) -> None:
    g = grains(grain)
    cases: list[Callable[[Any], Any]] = [
        lambda m: m.ZipMapDataset([]),
        lambda m: m.ZipMapDataset([m.MapDataset.range(3), m.MapDataset.range(4)]),
        lambda m: m.ZipMapDataset([m.MapDataset.range(3).to_iter_dataset()]),
        lambda m: m.ZipIterDataset([]),
        lambda m: m.LimitIterDataset(m.MapDataset.range(3).to_iter_dataset(), 0),
        lambda m: m.LimitIterDataset(m.MapDataset.range(3).to_iter_dataset(), -2),
        lambda m: m.LimitIterDataset(m.MapDataset.range(3).to_iter_dataset(), None),
    ]
    for case in cases:
        with pytest.raises((TypeError, ValueError)) as theirs:
            case(g)
        with pytest.raises(type(theirs.value)):
            case(MINE)


# Checkpoints (every build).


def resume_all(ds: Any, workers: tuple[int, int] = (0, 2)) -> list[Any]:
    """After every k elements (0 to the end): the state, as JSON, taken with one worker
    count and given to a fresh iterator with the other, gives exactly the rest."""
    full = list(ds)
    for k in range(len(full) + 1):
        for before, after in (workers, workers[::-1]):
            iterator = iter(ds.prefetch(before))
            taken = list(itertools.islice(iterator, k))
            state = json.dumps(iterator.get_state())
            iterator.close()
            fresh = iter(ds.prefetch(after))
            fresh.set_state(state)
            rest = list(fresh)
            assert_same(taken + rest, full, f"resumed after {k} with {before} then {after} workers")
    return full


RESUMED: dict[str, Callable[[], Any]] = {
    "zip of iterators": lambda: ZipIterDataset(
        [M.range(9).to_iter_dataset(), M.range(9).shuffle(seed=1).to_iter_dataset().map(tenfold)]
    ),
    "zip of a filter and a range": lambda: ZipIterDataset(
        [M.range(16).to_iter_dataset().filter(odd), M.range(8).to_iter_dataset()]
    ),
    "zip not strict": lambda: ZipIterDataset([M.range(9), M.range(5).to_iter_dataset()], strict=False),
    "zip then batch": lambda: ZipIterDataset([M.range(10), M.range(10)]).batch(3),
    "zip of a mix and a range": lambda: ZipIterDataset(
        [
            aioloader.IterDataset.mix([M.range(5).to_iter_dataset(), M.range(10, 15).to_iter_dataset()]),
            M.range(10),
        ]
    ),
    "zip of MapDatasets made into one": lambda: (
        ZipMapDataset([M.range(8).shuffle(seed=9), M.range(8)]).to_iter_dataset().map(sum)
    ),
    "limit smaller": lambda: LimitIterDataset(M.range(20).to_iter_dataset(), 6),
    "limit equal": lambda: LimitIterDataset(M.range(6).to_iter_dataset(), 6),
    "limit larger": lambda: LimitIterDataset(M.range(6).to_iter_dataset(), 9),
    "limit after filter": lambda: LimitIterDataset(M.range(40).to_iter_dataset().filter(odd), 8),
    "limit after batch": lambda: LimitIterDataset(M.range(10).batch(3).to_iter_dataset(), 2),
    "limit of an endless repeat": lambda: LimitIterDataset(M.range(4).repeat().to_iter_dataset(), 10),
    "limit of a zip, then map": lambda: LimitIterDataset(ZipIterDataset([M.range(9), M.range(9)]), 5).map(
        sum
    ),
}


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_a_fresh_iterator_given_the_state_gives_exactly_the_rest(name: str) -> None:
    assert resume_all(RESUMED[name]())


def test_a_state_resumes_in_the_same_pipeline_built_anew() -> None:
    state = state_after(ZipIterDataset([M.range(5), LimitIterDataset(M.range(9), 5)]), 2)
    fresh = iter(ZipIterDataset([M.range(5), LimitIterDataset(M.range(9), 5)]))
    fresh.set_state(state)
    assert list(fresh) == [(2, 2), (3, 3), (4, 4)]


def test_a_state_taken_at_the_end_resumes_to_nothing() -> None:
    for ds in (LimitIterDataset(M.range(5).to_iter_dataset(), 3), ZipIterDataset([M.range(3), M.range(3)])):
        iterator = iter(ds)
        assert len(list(iterator)) == 3
        state = iterator.get_state()
        fresh = iter(ds)
        fresh.set_state(state)
        assert list(fresh) == []


def test_a_limit_state_resumes_in_a_limit_with_another_count_as_in_grain() -> None:
    parent = M.range(20).to_iter_dataset()
    iterator = iter(LimitIterDataset(parent, 3))
    assert [next(iterator), next(iterator)] == [0, 1]
    state = iterator.get_state()
    longer = iter(LimitIterDataset(parent, 5))
    longer.set_state(state)
    assert list(longer) == [2, 3, 4]
    shorter = iter(LimitIterDataset(parent, 1))
    shorter.set_state(state)
    assert list(shorter) == []


def test_async_iteration_gives_the_same_elements_and_state() -> None:
    ds = ZipIterDataset([LimitIterDataset(M.range(30).to_iter_dataset(), 8), M.range(8)]).prefetch(2)

    async def run() -> tuple[list[Any], list[Any]]:
        iterator = aiter(ds)
        first = [await anext(iterator) for _ in range(3)]
        fresh = aiter(ds)
        fresh.set_state(iterator.get_state())
        await iterator.aclose()
        return first, [x async for x in fresh]

    first, rest = asyncio.run(run())
    assert first + rest == list(ds)


# States of other pipelines.


OTHER_STATES = [
    ("a zip of 2 into a zip of 3", ZipIterDataset([M.range(5)] * 2), ZipIterDataset([M.range(5)] * 3)),
    ("a limit into a zip", LimitIterDataset(M.range(5), 3), ZipIterDataset([M.range(5)])),
    ("a zip into a limit", ZipIterDataset([M.range(5)]), LimitIterDataset(M.range(5), 3)),
    ("a zip into a plain part", ZipIterDataset([M.range(5)]), M.range(5).to_iter_dataset()),
    ("a plain part into a limit", M.range(5).to_iter_dataset(), LimitIterDataset(M.range(5), 3)),
    (
        "a limit of one range into one of another",
        LimitIterDataset(M.range(5), 3),
        LimitIterDataset(M.range(6), 3),
    ),
    (
        "a zip with other parents",
        ZipIterDataset([M.range(5), M.range(5)]),
        ZipIterDataset([M.range(5), M.range(6)]),
    ),
    (
        "a zip's parents swapped",
        ZipIterDataset([M.range(5), M.range(5).shuffle(seed=1)]),
        ZipIterDataset([M.range(5).shuffle(seed=1), M.range(5)]),
    ),
]


@pytest.mark.parametrize(("label", "source", "target"), OTHER_STATES, ids=[c[0] for c in OTHER_STATES])
def test_a_state_of_another_pipeline_is_a_value_error(label: str, source: Any, target: Any) -> None:
    assert_refuses_state(source, target)


def test_a_damaged_state_is_a_value_error() -> None:
    zipped, limited = ZipIterDataset([M.range(5)] * 2), LimitIterDataset(M.range(5), 3)
    zip_state, limit_state = state_after(zipped, 1), state_after(limited, 1)
    damaged = [
        (zipped, {**zip_state, "dataset": {**zip_state["dataset"], "parents": "nope"}}),
        (limited, {**limit_state, "dataset": {**limit_state["dataset"], "given": -1}}),
        (limited, {**limit_state, "dataset": {**limit_state["dataset"], "given": True}}),
        (limited, {"version": 1, "dataset": {"stage": "limit"}}),
    ]
    for ds, state in damaged:
        iterator = iter(ds)
        with pytest.raises(ValueError, match="state"):
            iterator.set_state(state)
        iterator.close()


# Bad arguments.


BAD_ARGUMENTS: list[BadArgument] = [
    (lambda: ZipMapDataset([]), ValueError, r"`parents` must hold at least one"),
    (lambda: ZipMapDataset([M.range(3), [1, 2, 3]]), TypeError, r"`parents\[1\]` must be a MapDataset"),
    (lambda: ZipMapDataset([M.range(3), M.range(3).to_iter_dataset()]), TypeError, r"`parents\[1\]`"),
    (lambda: ZipMapDataset(7), TypeError, r"`parents` must be a sequence"),
    (lambda: ZipMapDataset("ab"), TypeError, r"`parents` must be a sequence"),
    (lambda: ZipMapDataset([M.range(3), M.range(4)]), ValueError, r"`parents` must all have the same length"),
    (lambda: ZipIterDataset([]), ValueError, r"`parents` must hold at least one"),
    (lambda: ZipIterDataset([M.range(3), None]), TypeError, r"`parents\[1\]` must be an IterDataset"),
    (lambda: ZipIterDataset([M.range(3)], strict="yes"), TypeError, r"`strict` must be a bool"),
    (lambda: ZipIterDataset([M.range(3)], False), TypeError, r"positional"),
    (lambda: LimitIterDataset(M.range(3).to_iter_dataset(), 0), ValueError, r"`count` must be greater"),
    (lambda: LimitIterDataset(M.range(3).to_iter_dataset(), -1), ValueError, r"`count` must be greater"),
    (lambda: LimitIterDataset(M.range(3).to_iter_dataset(), True), TypeError, r"`count` must be an int"),
    (lambda: LimitIterDataset(M.range(3).to_iter_dataset(), 2.0), TypeError, r"`count` must be an int"),
    (lambda: LimitIterDataset(M.range(3).to_iter_dataset(), "2"), TypeError, r"`count` must be an int"),
    (lambda: LimitIterDataset([1, 2, 3], 2), TypeError, r"`parent` must be an IterDataset"),
    (
        lambda: LimitIterDataset(M.range(3).to_iter_dataset().device_put(), 2),
        ValueError,
        r"`device_put` must be the last",
    ),
]


test_a_bad_argument_is_an_error_naming_it = refused_by_name(BAD_ARGUMENTS)


def test_a_numpy_count_and_one_dataset_as_parents_are_taken() -> None:
    assert list(LimitIterDataset(M.range(9).to_iter_dataset(), np.int64(2))) == [0, 1]
    assert list(ZipIterDataset(M.range(2).to_iter_dataset())) == [(0,), (1,)]
    assert list(ZipMapDataset(iter([M.range(2), M.range(2)]))) == [(0, 0), (1, 1)]


def test_parents_are_kept_as_given_and_the_classes_are_datasets() -> None:
    source = M.range(4)
    zipped = ZipIterDataset([source, source.to_iter_dataset()])
    assert zipped.parents[0] is source
    assert LimitIterDataset(source, 2).parents == (source,)
    assert isinstance(ZipMapDataset([source]), aioloader.MapDataset)
    assert isinstance(zipped, aioloader.IterDataset)


# Hostile parents.


class Exploding(aioloader.IterDataset[int]):
    """A Grain-style IterDataset whose iterator gives 0, 1, ... and raises at `bad`."""

    def __init__(self, bad: int, error: type[Exception] = Boom) -> None:
        super().__init__()
        self.bad, self.error = bad, error

    def __iter__(self) -> Any:
        return ExplodingIterator(self.bad, self.error)


class ExplodingIterator:
    def __init__(self, bad: int, error: type[Exception]) -> None:
        self.next, self.bad, self.error = 0, bad, error

    def __next__(self) -> int:
        if self.next >= self.bad:
            raise self.error(f"element {self.next}")
        self.next += 1
        return self.next - 1

    def get_state(self) -> dict[str, int]:
        return {"next": self.next}

    def set_state(self, state: dict[str, int]) -> None:
        self.next = state["next"]


def first_then_error(iterator: Iterator[Any], count: int, kind: type[Exception]) -> list[Any]:
    out = [next(iterator) for _ in range(count)]
    with pytest.raises(kind, match="element"):
        next(iterator)
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_a_parent_that_fails_mid_way_raises_its_own_error_after_the_elements_before(workers: int) -> None:
    failing = M.range(10).map(explode_at(4))
    zipped = ZipIterDataset([M.range(10), failing]).prefetch(workers)
    assert first_then_error(iter(zipped), 4, Boom) == [(i, i) for i in range(4)]
    limited = LimitIterDataset(failing.to_iter_dataset(), 8).prefetch(workers)
    assert first_then_error(iter(limited), 4, Boom) == [0, 1, 2, 3]
    in_order = ZipIterDataset([Exploding(3, KeyError), M.range(10)]).prefetch(workers)
    assert first_then_error(iter(in_order), 3, KeyError) == [(i, i) for i in range(3)]


def test_the_error_names_the_parent_of_the_zip() -> None:
    iterator = iter(ZipIterDataset([M.range(5), Exploding(1)]))
    next(iterator)
    with pytest.raises(Boom) as caught:
        next(iterator)
    assert any("parents[1] of ZipIterDataset" in n for n in getattr(caught.value, "__notes__", []))


def test_a_limit_never_reads_past_its_count() -> None:
    assert list(LimitIterDataset(Exploding(3), 3)) == [0, 1, 2]
    iterator = iter(LimitIterDataset(Exploding(3), 3))
    assert list(itertools.islice(iterator, 2)) == [0, 1]
    fresh = iter(LimitIterDataset(Exploding(3), 3))
    fresh.set_state(iterator.get_state())
    assert list(fresh) == [2]


def test_a_zip_resumes_after_a_failure_from_before_the_failed_tuple() -> None:
    # The failed tuple took an element of the first parent; the state is from before it.
    ds = ZipIterDataset([M.range(10), Exploding(3)])
    iterator = iter(ds)
    first_then_error(iterator, 3, Boom)
    state = iterator.get_state()
    fresh = iter(ZipIterDataset([M.range(10), Exploding(5)]))
    fresh.set_state(state)
    assert list(itertools.islice(fresh, 2)) == [(3, 3), (4, 4)]
    fresh.close()


def test_a_close_from_another_thread_ends_a_strict_zip_without_a_length_error() -> None:
    """The close cuts the first parent short while the second still has elements: that is
    the end the caller asked for, not parents of different lengths."""
    release = threading.Event()

    def slow(x: int) -> int:
        if x == 3:
            release.wait(30)
        return x

    blocked = M.range(10).to_iter_dataset().map(slow).prefetch(1)
    iterator = iter(ZipIterDataset([blocked, M.range(10)]))
    assert next(iterator) == (0, 0)
    closer = threading.Timer(0.2, iterator.close)
    closer.start()
    try:
        rest = list(iterator)  # ends: no ValueError about argument 2 being longer
    finally:
        release.set()
        closer.join(30)
    assert rest == [(x, x) for x in range(1, len(rest) + 1)]
