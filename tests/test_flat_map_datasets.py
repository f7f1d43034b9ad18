"""`FlatMapMapDataset` and `FlatMapIterDataset`: one element in, any number out.

Against Grain 0.2.18 where it is installed (the GIL build of CPython 3.11): the same
length, elements and `None` holes for the MapDataset (fan-outs of 0, 1, several and
exactly `max_fan_out`, after a shuffle, a filter and a map), and the same elements for
the IterDataset. Everywhere: a fresh iterator resumed from the state after any number
of outputs (in the middle of one element's outputs too) gives exactly the rest, and the
errors (a flat map that raises, returns no iterable, gives too many, raises
StopIteration; bad arguments; another pipeline's state) say what went wrong.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader.experimental import FlatMapIterDataset, FlatMapMapDataset, FlatMapTransform
from tests.support.datasets import odd
from tests.support.outputs import assert_same, drain, notes

needs_grain = pytest.mark.skipif(
    importlib.util.find_spec("grain") is None,
    reason="Grain 0.2.18 is installed on the GIL build of CPython 3.11 only",
)


class Spread(FlatMapTransform):
    """Element `x` gives `x % (max_fan_out + 1)` outputs, `10 * x + k`: fan-outs of 0, 1,
    several and exactly `max_fan_out`, as `x` goes."""

    def __init__(self, max_fan_out: int = 3) -> None:
        self.max_fan_out = max_fan_out

    def flat_map(self, element: int) -> list[int]:
        return [10 * element + k for k in range(element % (self.max_fan_out + 1))]


class Unbatch(FlatMapTransform):
    """A batch's elements, one by one; no `max_fan_out`, as Grain's test of it has none."""

    def flat_map(self, element: Any) -> list[Any]:
        return list(element)


class Yielding(FlatMapTransform):
    """`Spread`, as a generator."""

    max_fan_out = 3

    def flat_map(self, element: int) -> Iterator[int]:
        yield from Spread(3).flat_map(element)


def namespace(module: Any) -> SimpleNamespace:
    """What a pipeline is built from: aioloader's classes, or Grain's under the same names."""
    names = module.experimental
    return SimpleNamespace(
        MapDataset=module.MapDataset,
        IterDataset=module.IterDataset,
        FlatMapMapDataset=names.FlatMapMapDataset,
        FlatMapIterDataset=names.FlatMapIterDataset,
    )


MINE = namespace(aioloader)
Build = Callable[[SimpleNamespace], Any]

MAP_PIPELINES: dict[str, Build] = {
    "range": lambda m: m.FlatMapMapDataset(m.MapDataset.range(13), Spread()),
    "fan-out of one": lambda m: m.FlatMapMapDataset(m.MapDataset.range(9), Spread(1)),
    "after a shuffle and a map": lambda m: m.FlatMapMapDataset(
        m.MapDataset.range(20).shuffle(seed=5).map(lambda x: x * 7), Spread(4)
    ),
    "after a filter (holes)": lambda m: m.FlatMapMapDataset(m.MapDataset.range(16).filter(odd), Spread()),
    "then a map and a filter": lambda m: (
        m.FlatMapMapDataset(m.MapDataset.range(12), Spread()).map(lambda x: x + 1).filter(odd)
    ),
    "sliced": lambda m: m.FlatMapMapDataset(m.MapDataset.range(12), Spread())[5:29:2],
    "twice": lambda m: m.FlatMapMapDataset(m.FlatMapMapDataset(m.MapDataset.range(6), Spread(2)), Spread(3)),
}

ITER_PIPELINES: dict[str, Build] = {
    "to_iter_dataset": lambda m: m.FlatMapIterDataset(m.MapDataset.range(15).to_iter_dataset(), Spread()),
    "after a filter": lambda m: m.FlatMapIterDataset(
        m.MapDataset.range(30).shuffle(seed=2).to_iter_dataset().filter(odd), Spread(4)
    ),
    "after a MapDataset filter": lambda m: m.FlatMapIterDataset(
        m.MapDataset.range(20).filter(odd).to_iter_dataset(), Spread()
    ),
    "unbatch": lambda m: m.FlatMapIterDataset(
        m.MapDataset.source([[0, 1, 2, 3], [], [4, 5], [6, 7, 8, 9], [], [], [10, 11, 12]]).to_iter_dataset(),
        Unbatch(),
    ),
    "then map, map_with_index and batch": lambda m: (
        m.FlatMapIterDataset(m.MapDataset.range(14).to_iter_dataset(), Spread())
        .map(lambda x: x * 2)
        .map_with_index(lambda i, x: (i, x))
        .batch(3)
    ),
    "after a mix": lambda m: m.FlatMapIterDataset(
        m.IterDataset.mix(
            [m.MapDataset.range(8).to_iter_dataset(), m.MapDataset.range(20, 30).to_iter_dataset()]
        ),
        Spread(),
    ),
    "twice": lambda m: m.FlatMapIterDataset(
        m.FlatMapIterDataset(m.MapDataset.range(7).to_iter_dataset(), Spread(2)), Spread(3)
    ),
}


# The MapDataset against Grain's.


@needs_grain
@pytest.mark.parametrize("name", MAP_PIPELINES)
def test_map_dataset_equals_grains(grain: Any, name: str) -> None:
    mine, theirs = MAP_PIPELINES[name](MINE), MAP_PIPELINES[name](namespace(grain))
    assert len(mine) == len(theirs)
    # Two epochs, and negative indices: each wraps through the parent, as in Grain.
    indices = list(range(-len(theirs), 2 * len(theirs)))
    expected = [theirs[i] for i in indices]
    assert [mine[i] for i in indices] == expected
    assert mine._getitems(indices) == expected
    assert list(mine) == list(theirs)


def test_map_dataset_slots_and_holes() -> None:
    ds = FlatMapMapDataset(aioloader.MapDataset.range(5), Spread(3))
    assert len(ds) == 15
    # Element x has x % 4 outputs, then None in its other slots.
    assert [ds[i] for i in range(15)] == [
        *(None, None, None),
        *(10, None, None),
        *(20, 21, None),
        *(30, 31, 32),
        *(None, None, None),
    ]
    assert list(ds) == [10, 20, 21, 30, 31, 32]


def test_map_dataset_length_is_capped_as_grains() -> None:
    forever = FlatMapMapDataset(aioloader.MapDataset.range(4).repeat(), Spread())
    assert len(forever) == sys.maxsize
    assert forever[3 * 10 + 1] == 21  # slot 1 of element 10, the repeat's 2: past the first epoch
    assert len(FlatMapMapDataset(aioloader.MapDataset.range(0), Spread())) == 0
    assert list(FlatMapMapDataset(aioloader.MapDataset.range(0), Spread())) == []


@needs_grain
def test_grains_transform_objects_are_taken(grain: Any) -> None:
    class GrainSpread(grain.experimental.FlatMapTransform):  # type: ignore[misc]
        max_fan_out = 3

        def flat_map(self, element: int) -> list[int]:
            return Spread(3).flat_map(element)

    mine = FlatMapMapDataset(aioloader.MapDataset.range(9), GrainSpread())
    theirs = grain.experimental.FlatMapMapDataset(grain.MapDataset.range(9), GrainSpread())
    assert [mine[i] for i in range(len(mine))] == [theirs[i] for i in range(len(theirs))]
    assert list(FlatMapIterDataset(aioloader.MapDataset.range(9).to_iter_dataset(), GrainSpread())) == list(
        mine
    )


def test_generator_flat_map_gives_the_same() -> None:
    ds = aioloader.MapDataset.range(11)
    assert list(FlatMapMapDataset(ds, Yielding())) == list(FlatMapMapDataset(ds, Spread()))
    assert list(FlatMapIterDataset(ds.to_iter_dataset(), Yielding())) == list(FlatMapMapDataset(ds, Spread()))


def test_a_flat_map_is_called_once_per_element_read_in_a_chunk() -> None:
    calls: list[int] = []

    class Counted(Spread):
        def flat_map(self, element: int) -> list[int]:
            calls.append(element)
            return super().flat_map(element)

    ds = FlatMapMapDataset(aioloader.MapDataset.range(6), Counted())
    assert ds._getitems(list(range(len(ds)))) == [ds[i] for i in range(len(ds))]
    assert calls[:6] == list(range(6))  # the chunk: one call each (Grain calls once a slot)


# The IterDataset against Grain's.


@needs_grain
@pytest.mark.parametrize("name", ITER_PIPELINES)
def test_iter_dataset_equals_grains(grain: Any, name: str) -> None:
    theirs = list(ITER_PIPELINES[name](namespace(grain)))
    assert theirs
    for workers in (0, 2):
        mine = list(ITER_PIPELINES[name](MINE).prefetch(workers))
        assert len(mine) == len(theirs), workers
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert_same(a, b, f"element {i} with {workers} workers")


def test_iter_dataset_takes_a_map_dataset_and_keeps_order() -> None:
    ds = FlatMapIterDataset(aioloader.MapDataset.range(6), Spread(3))
    assert list(ds) == [10, 20, 21, 30, 31, 32, 50]


def test_a_hole_kept_by_allow_nones_passes_as_one_none() -> None:
    parent = aioloader.MapDataset.range(4).filter(odd).to_iter_dataset(allow_nones=True)
    assert list(FlatMapIterDataset(parent, Spread(3))) == [None, 10, None, 30, 31, 32]


# Checkpoints: a fresh iterator resumed from the state after k outputs gives the rest.


def resumes_exactly(build: Callable[[], Any], workers: int = 0) -> None:
    expected = list(build())
    for k in range(len(expected) + 1):
        iterator = iter(build())
        assert_same([next(iterator) for _ in range(k)], expected[:k], f"the first {k}")
        state = json.loads(json.dumps(iterator.get_state()))
        resumed = iter(build().prefetch(workers))
        resumed.set_state(state)
        assert_same(list(resumed), expected[k:], f"resumed after {k}")
        assert_same(list(iterator), expected[k:], f"continued after {k}")  # the state changed nothing


@pytest.mark.parametrize("name", ITER_PIPELINES)
def test_iter_dataset_resumes_exactly(name: str) -> None:
    resumes_exactly(lambda: ITER_PIPELINES[name](MINE))


def test_iter_dataset_resumes_in_an_element_with_workers() -> None:
    build = ITER_PIPELINES["after a filter"]
    resumes_exactly(lambda: build(MINE), workers=2)


def test_state_in_the_middle_of_an_element() -> None:
    build = ITER_PIPELINES["to_iter_dataset"]
    iterator = iter(build(MINE))
    assert [next(iterator) for _ in range(4)] == [10, 20, 21, 30]
    state = iterator.get_state()
    assert state["dataset"]["stage"] == "flat_map"
    assert state["dataset"]["given"] == 1
    resumed = iter(build(MINE))
    resumed.set_state(state)
    assert list(itertools.islice(resumed, 3)) == [31, 32, 50]


def test_state_after_an_elements_last_output_moves_past_it() -> None:
    calls: list[int] = []

    class Counted(Spread):
        def flat_map(self, element: int) -> list[int]:
            calls.append(element)
            return super().flat_map(element)

    def build() -> Any:
        return FlatMapIterDataset(aioloader.MapDataset.range(8).to_iter_dataset(), Counted())

    iterator = iter(build())
    assert list(itertools.islice(iterator, 6)) == [10, 20, 21, 30, 31, 32]
    state = iterator.get_state()
    assert state["dataset"]["given"] == 0
    calls.clear()
    resumed = iter(build())
    resumed.set_state(state)
    assert next(resumed) == 50
    assert calls == [4, 5]  # element 3 is not expanded again


@pytest.mark.parametrize("name", ["range", "after a filter (holes)", "then a map and a filter"])
def test_map_dataset_iterator_resumes_exactly(name: str) -> None:
    resumes_exactly(lambda: MAP_PIPELINES[name](MINE).to_iter_dataset())


# Errors.


class Broken(FlatMapTransform):
    max_fan_out = 3

    def flat_map(self, element: int) -> list[int]:
        if element == 3:
            raise KeyError("no such element")
        return [element, element]


def test_an_error_keeps_its_type_with_a_note_naming_the_transform() -> None:
    ds = FlatMapMapDataset(aioloader.MapDataset.range(5), Broken())
    with pytest.raises(KeyError, match="no such element") as raised:
        ds[10]
    assert "FlatMapMapDataset(Broken.flat_map)" in notes(raised.value)
    assert "index 3" in notes(raised.value)

    outputs, error = drain(FlatMapIterDataset(aioloader.MapDataset.range(5).to_iter_dataset(), Broken()))
    assert outputs == [0, 0, 1, 1, 2, 2]
    assert isinstance(error, KeyError)
    assert "FlatMapIterDataset(Broken.flat_map) failed on element 3" in notes(error)


def test_an_error_while_iterating_the_map_dataset() -> None:
    outputs, error = drain(FlatMapMapDataset(aioloader.MapDataset.range(5), Broken()))
    assert outputs == [0, 0, 1, 1, 2, 2]
    assert isinstance(error, KeyError)
    assert "Broken.flat_map" in notes(error)


class NotIterable(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: int) -> Any:
        return element


def test_a_flat_map_returning_no_iterable_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"NotIterable\.flat_map must return an iterable"):
        FlatMapMapDataset(aioloader.MapDataset.range(3), NotIterable())[0]
    with pytest.raises(TypeError, match=r"NotIterable\.flat_map must return an iterable"):
        list(FlatMapIterDataset(aioloader.MapDataset.range(3).to_iter_dataset(), NotIterable()))


class StopsInside(FlatMapTransform):
    """A generator that calls `next` on an exhausted iterator at element 2."""

    max_fan_out = 2

    def flat_map(self, element: int) -> Iterator[int]:
        yield element
        if element == 2:
            next(iter([]))


class RaisesStop(FlatMapTransform):
    """A plain function whose StopIteration escapes at element 2."""

    max_fan_out = 2

    def flat_map(self, element: int) -> list[int]:
        if element == 2:
            raise StopIteration
        return [element]


@pytest.mark.parametrize("transform", [StopsInside(), RaisesStop()], ids=lambda t: type(t).__name__)
def test_a_stop_iteration_does_not_end_the_dataset(transform: FlatMapTransform) -> None:
    with pytest.raises(RuntimeError):
        FlatMapMapDataset(aioloader.MapDataset.range(5), transform)[4]
    for ds in (
        FlatMapMapDataset(aioloader.MapDataset.range(5), transform),
        FlatMapIterDataset(aioloader.MapDataset.range(5).to_iter_dataset(), transform),
    ):
        outputs, error = drain(ds)
        assert isinstance(error, RuntimeError), error
        assert outputs == [0, 1]  # element 2 is taken whole before its first output


class TooMany(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element: int) -> list[int]:
        return [element] * element


@needs_grain
def test_grain_too_raises_value_error_past_max_fan_out(grain: Any) -> None:
    theirs = grain.experimental.FlatMapMapDataset(grain.MapDataset.range(5), TooMany())
    assert [theirs[i] for i in range(6)] == [None, None, 1, None, 2, 2]
    with pytest.raises(ValueError, match="exceeds specified max fan-out"):
        theirs[6]


def test_more_than_max_fan_out_is_a_value_error() -> None:
    ds = FlatMapMapDataset(aioloader.MapDataset.range(5), TooMany())
    assert [ds[i] for i in range(6)] == [None, None, 1, None, 2, 2]  # element 2 gives exactly 2
    with pytest.raises(ValueError, match="max_fan_out=2") as raised:
        ds[6]
    assert "FlatMapMapDataset(TooMany.flat_map)" in notes(raised.value)


def test_more_than_max_fan_out_stops_the_iter_dataset() -> None:
    outputs, error = drain(FlatMapIterDataset(aioloader.MapDataset.range(5).to_iter_dataset(), TooMany()))
    assert outputs == [1, 2, 2]
    assert isinstance(error, ValueError)
    assert "max_fan_out=2" in str(error)


def test_a_generator_without_end_is_cut_at_max_fan_out() -> None:
    class Endless(FlatMapTransform):
        max_fan_out = 5

        def flat_map(self, element: int) -> Iterator[int]:
            yield from itertools.count()

    with pytest.raises(ValueError, match="max_fan_out=5"):
        FlatMapMapDataset(aioloader.MapDataset.range(2), Endless())[0]
    with pytest.raises(ValueError, match="max_fan_out=5"):
        next(iter(FlatMapIterDataset(aioloader.MapDataset.range(2).to_iter_dataset(), Endless())))


def test_without_max_fan_out_the_iter_dataset_has_no_bound() -> None:
    ds = FlatMapIterDataset(aioloader.MapDataset.source([list(range(50))]).to_iter_dataset(), Unbatch())
    assert list(ds) == list(range(50))


def test_a_close_stops_a_generator_without_end_or_bound() -> None:
    class Endless(FlatMapTransform):
        def flat_map(self, element: int) -> Iterator[int]:
            yield from itertools.count()

    iterator = iter(FlatMapIterDataset(aioloader.MapDataset.range(2).to_iter_dataset(), Endless()))
    ended: list[BaseException] = []

    def take() -> None:
        try:
            next(iterator)
        except BaseException as error:
            ended.append(error)

    thread = threading.Thread(target=take)
    thread.start()
    time.sleep(0.05)  # let it start expanding the first element
    iterator.close()
    thread.join(10)
    assert not thread.is_alive()
    assert len(ended) == 1
    assert isinstance(ended[0], StopIteration)


class WithFanOut(FlatMapTransform):
    def __init__(self, max_fan_out: Any) -> None:
        self.max_fan_out = max_fan_out

    def flat_map(self, element: Any) -> list[Any]:
        return [element]


def test_bad_arguments_name_the_parameter() -> None:
    parent = aioloader.MapDataset.range(3)
    for make in (FlatMapMapDataset, lambda p, t: FlatMapIterDataset(p.to_iter_dataset(), t)):
        with pytest.raises(TypeError, match="`transform`"):
            make(parent, object())
        with pytest.raises(TypeError, match="`transform`"):
            make(parent, lambda x: [x])
        with pytest.raises(TypeError, match="`transform` is the class Spread"):
            make(parent, Spread)
        for bad in (0, -1):
            with pytest.raises(ValueError, match=r"`transform\.max_fan_out`"):
                make(parent, WithFanOut(bad))
        with pytest.raises(TypeError, match=r"`transform\.max_fan_out`"):
            make(parent, WithFanOut("3"))
    with pytest.raises(TypeError, match=r"`transform\.max_fan_out` must be set"):
        FlatMapMapDataset(parent, Unbatch())
    with pytest.raises(TypeError, match="`parent`"):
        FlatMapMapDataset(parent.to_iter_dataset(), Spread())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`parent`"):
        FlatMapIterDataset([1, 2], Spread())  # type: ignore[arg-type]
    assert len(FlatMapMapDataset(parent, WithFanOut(np.int64(2)))) == 6  # NumPy's ints, as Grain


def test_an_async_flat_map_is_refused() -> None:
    class Async(FlatMapTransform):
        max_fan_out = 1

        async def flat_map(self, element: int) -> list[int]:  # type: ignore[override]
            return [element]

    with pytest.raises(TypeError, match="must not be `async def`"):
        FlatMapMapDataset(aioloader.MapDataset.range(3), Async())


def test_a_state_of_another_pipeline_is_a_value_error() -> None:
    def flat(transform: FlatMapTransform) -> Any:
        return FlatMapIterDataset(aioloader.MapDataset.range(10).to_iter_dataset(), transform)

    def state_after(ds: Any, count: int) -> dict[str, Any]:
        iterator = iter(ds)
        for _ in range(count):
            next(iterator)
        state: dict[str, Any] = iterator.get_state()
        return state

    others = {
        "a window shuffle": aioloader.WindowShuffleIterDataset(
            aioloader.MapDataset.range(10).to_iter_dataset(), window_size=3, seed=1
        ),
        "a parallel part": aioloader.MapDataset.range(10).to_iter_dataset(),
        "another max_fan_out": flat(Spread(4)),
        "another transform": flat(Yielding()),
    }
    for other in others.values():
        with pytest.raises(ValueError, match="`state`"):
            iter(flat(Spread(3))).set_state(state_after(other, 2))
        with pytest.raises(ValueError, match="`state`"):
            iter(other).set_state(state_after(flat(Spread(3)), 2))

    state = state_after(flat(Spread(3)), 4)
    state["dataset"]["given"] = 7  # more outputs than that element gives
    with pytest.raises(ValueError, match="gives it 3 now"):
        iter(flat(Spread(3))).set_state(state)
    state["dataset"]["given"] = -1
    with pytest.raises(ValueError, match="given=-1"):
        iter(flat(Spread(3))).set_state(state)


def test_repr_names_the_transform_and_its_fan_out() -> None:
    assert "Spread.flat_map, max_fan_out=3" in repr(
        FlatMapMapDataset(aioloader.MapDataset.range(2), Spread())
    )
    assert "Unbatch.flat_map, max_fan_out=None" in repr(
        FlatMapIterDataset(aioloader.MapDataset.range(2).to_iter_dataset(), Unbatch())
    )
