"""Hostile tests of `DatasetOptions`, `WithOptionsIterDataset` and the filter checks, and of
`multithread_prefetch`, `pick_performance_config`, `assert_equal_output_after_checkpoint`
and `aioloader.config`.

The filter checks are compared with Grain 0.2.18 (3.11 only) element for element and error
for error, on pipelines with several filters in a part and after a mix, an interleave, a
zip, a packer, a window shuffle, a repeat, a rebatch, a limit, a flat map and a thread
prefetch, with `map_with_index` / `random_map` after filters, batches before and after,
answers that are NumPy bools or ints, a filter that raises, `allow_nones=True`, and holes;
then aioloader with itself at every worker count, resumed at many positions, with states
crossing between runs with and without checks, under `async for`, `device_put`, the
interpreter executor, a `close()` from another thread and `statistics()` polled meanwhile.
Expected values that come from Grain are written out, so that the other builds check them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import operator
import re
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader._executors.interpreter.subinterpreters import unavailable
from aioloader.experimental import DatasetOptions, WithOptionsIterDataset
from tests.conftest import repeated

RAISE = "filter_raise_threshold_ratio"
WARN = "filter_warn_threshold_ratio"
x = al.experimental


def first(e: Any) -> int:
    """The int an element stands for (a number, an array, a dict's "x", a tuple's first)."""
    if isinstance(e, dict):
        e = e["x"]
    if isinstance(e, tuple):
        e = e[0]
    return int(np.asarray(e).flat[0])


CONDITIONS: dict[str, Callable[[Any], Any]] = {
    "KeepEven": lambda e: first(e) % 2 == 0,
    "KeepNoThirds": lambda e: first(e) % 3 != 0,
    "KeepNoFifths": lambda e: first(e) % 5 != 0,
    "KeepBelow700": lambda e: first(e) < 700,
    "KeepNpBool": lambda e: np.bool_(first(e) % 4 != 0),
    "KeepInt": lambda e: first(e) % 3,  # an int: counts by its truth value
    "KeepNoneOrEven": lambda e: e is None or e % 2 == 0,
}


def keep(g: Any, name: str) -> Any:
    """A filter of `g`'s Filter class named `name` (the checks' messages name the class)."""
    condition = CONDITIONS[name]
    return type(name, (g.transforms.Filter,), {"filter": lambda self, e: condition(e)})()


def _with(ds: Any, g: Any, **options: Any) -> Any:
    return g.experimental.WithOptionsIterDataset(ds, g.experimental.DatasetOptions(**options))


def _two(g: Any) -> Any:
    class Two(g.experimental.FlatMapTransform):  # type: ignore[misc]
        max_fan_out = 2

        def flat_map(self, e: int) -> list[int]:
            return [e, e + 100_000]

    return Two()


def _raise_at_1700(e: int) -> bool:
    if e == 1700:
        raise ValueError("bad element 1700")
    return e % 2 == 0


def _pair(i: int, e: Any) -> tuple[int, Any]:
    return i, e


def _draw(e: Any, rng: np.random.Generator) -> tuple[Any, int]:
    return e, int(rng.integers(1 << 30))


# Each pipeline over a module `g` of Grain's names (grain, or aioloader) and its options.
Build = Callable[[Any, dict[str, Any]], Any]
PIPELINES: dict[str, Build] = {
    "three filters, a map between": lambda g, o: _with(
        g.MapDataset.range(4000)
        .to_iter_dataset()
        .filter(keep(g, "KeepNoThirds"))
        .map(lambda e: 2 * e)
        .filter(keep(g, "KeepNoFifths"))
        .filter(keep(g, "KeepBelow700")),
        g,
        **o,
    ),
    "map_with_index after filters": lambda g, o: _with(
        g.MapDataset.range(3000)
        .to_iter_dataset()
        .filter(keep(g, "KeepNoThirds"))
        .filter(keep(g, "KeepEven"))
        .map_with_index(_pair),
        g,
        **o,
    ),
    "random_map after a filter": lambda g, o: _with(
        g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepNoThirds")).random_map(_draw, seed=3),
        g,
        **o,
    ),
    "map_with_index after MapDataset holes": lambda g, o: _with(
        g.MapDataset.range(3000).filter(keep(g, "KeepNoThirds")).to_iter_dataset().map_with_index(_pair),
        g,
        **o,
    ),
    "mix, then a filter": lambda g, o: _with(
        g.IterDataset.mix(
            [
                g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepEven")),
                g.MapDataset.range(3000).to_iter_dataset(),
            ],
            [0.3, 0.7],
        ).filter(keep(g, "KeepNoThirds")),
        g,
        **o,
    ),
    "interleave, then a filter": lambda g, o: _with(
        g.experimental.InterleaveIterDataset(
            [
                g.MapDataset.range(1500).to_iter_dataset().filter(keep(g, "KeepNoFifths")),
                g.MapDataset.range(2000).to_iter_dataset(),
            ],
            cycle_length=2,
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "zip, then a filter": lambda g, o: _with(
        g.experimental.ZipIterDataset(
            [
                g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepNoFifths")),
                g.MapDataset.range(3000).to_iter_dataset(),
            ],
            strict=False,
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "packer, then a filter": lambda g, o: _with(
        g.experimental.FirstFitPackIterDataset(
            g.MapDataset.range(3000)
            .map(lambda v: {"x": np.arange(v % 5 + 1, dtype=np.int32) + v})
            .to_iter_dataset()
            .filter(keep(g, "KeepEven")),
            length_struct={"x": 8},
            num_packing_bins=3,
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "window shuffle, then a filter": lambda g, o: _with(
        g.experimental.WindowShuffleIterDataset(
            g.MapDataset.range(1400).to_iter_dataset().filter(keep(g, "KeepNoFifths")), window_size=20, seed=4
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "repeat, then filters": lambda g, o: _with(
        g.experimental.RepeatIterDataset(
            g.MapDataset.range(700).to_iter_dataset().filter(keep(g, "KeepNoFifths")), num_epochs=3
        )
        .filter(keep(g, "KeepBelow700"))
        .filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "rebatch, then a filter": lambda g, o: _with(
        g.experimental.RebatchIterDataset(
            g.MapDataset.range(12000).to_iter_dataset().batch(4), batch_size=3
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "limit, then a filter": lambda g, o: _with(
        g.experimental.LimitIterDataset(
            g.MapDataset.range(5000).to_iter_dataset().filter(keep(g, "KeepNoThirds")), count=2500
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "flat map, then a filter": lambda g, o: _with(
        g.experimental.FlatMapIterDataset(
            g.MapDataset.range(2000).to_iter_dataset().filter(keep(g, "KeepNoThirds")), _two(g)
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "thread prefetch, then a filter": lambda g, o: _with(
        g.experimental.ThreadPrefetchIterDataset(
            g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepNoFifths")), prefetch_buffer_size=5
        ).filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "a batch between filters": lambda g, o: _with(
        g.MapDataset.range(9000)
        .to_iter_dataset()
        .filter(keep(g, "KeepNoFifths"))
        .batch(3)
        .filter(keep(g, "KeepEven")),
        g,
        **o,
    ),
    "a batch first, another after": lambda g, o: _with(
        g.MapDataset.range(3000)
        .to_iter_dataset()
        .batch(2)
        .filter(keep(g, "KeepEven"))
        .map(lambda b: b + 1)
        .batch(3),
        g,
        **o,
    ),
    "NumPy bool and int answers": lambda g, o: _with(
        g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepNpBool")).filter(keep(g, "KeepInt")),
        g,
        **o,
    ),
    "a filter raises": lambda g, o: _with(
        g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepNoFifths")).filter(_raise_at_1700),
        g,
        **o,
    ),
    "allow_nones": lambda g, o: _with(
        g.MapDataset.range(2000)
        .filter(keep(g, "KeepNoThirds"))
        .to_iter_dataset(allow_nones=True)
        .filter(keep(g, "KeepNoneOrEven")),
        g,
        **o,
    ),
}


def fingerprint(e: Any) -> Any:
    if isinstance(e, dict):
        return sorted((k, np.asarray(v).tolist()) for k, v in e.items())
    if isinstance(e, tuple):
        return tuple(np.asarray(v).tolist() for v in e)
    return np.asarray(e).tolist()


def outcome(iterable: Any) -> tuple[list[Any], str | None]:
    """The elements before the end or the error, and the error's type and first sentence."""
    got: list[Any] = []
    try:
        for e in iterable:
            got.append(fingerprint(e))
    except Exception as error:  # compared, not swallowed
        # Grain names a function with its file and line, aioloader by its name alone.
        message = re.sub(r" @ [^)]*\)", ")", str(error).split(" elements.")[0])
        return got, f"{type(error).__name__}: {message}"
    return got, None


def mine(name: str, options: dict[str, Any], workers: int | None) -> Any:
    ds = PIPELINES[name](al, options)
    return ds if workers is None else ds.prefetch(workers)


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    """The checks' warnings go to the log; these tests count outputs, not lines."""
    logging.getLogger("aioloader").setLevel(logging.ERROR)
    yield
    logging.getLogger("aioloader").setLevel(logging.NOTSET)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_elements_and_errors_are_grains(grain: ModuleType, name: str) -> None:
    for options in ({RAISE: 0.3}, {RAISE: 0.8, WARN: None}):
        expected = outcome(PIPELINES[name](grain, options))
        assert outcome(mine(name, options, None)) == expected, options


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_worker_count_gives_the_same_elements_and_error(name: str) -> None:
    for options in ({RAISE: 0.5}, {RAISE: 0.8}, {WARN: 0.2}):
        expected = outcome(mine(name, options, None))
        for workers in (0, 1, 3):
            assert outcome(mine(name, options, workers)) == expected, (options, workers)


# Resuming under checks.
POSITIONS = (0, 1, 333, 999, 1000)
RESUMABLE = [
    "three filters, a map between",
    "map_with_index after filters",
    "random_map after a filter",
    "map_with_index after MapDataset holes",
    "mix, then a filter",
    "interleave, then a filter",
    "zip, then a filter",
    "window shuffle, then a filter",
    "repeat, then filters",
    "flat map, then a filter",
    "thread prefetch, then a filter",
    "a batch first, another after",
    "NumPy bool and int answers",
    "allow_nones",
]


def _tail_after(ds: Any, k: int, state: Any) -> tuple[list[Any], str | None]:
    iterator = iter(ds)
    iterator.set_state(state)
    return outcome(iterator)


def _state_after(ds: Any, k: int) -> Any:
    iterator = iter(ds)
    for _ in range(k):
        next(iterator)
    state = iterator.get_state()
    iterator.close()
    return state


@pytest.mark.parametrize("workers", [None, 2])
@pytest.mark.parametrize("name", RESUMABLE)
def test_states_under_checks_resume_an_uninterrupted_run(name: str, workers: int | None) -> None:
    checked = {WARN: 1.0}  # checks every filter, never fires
    full, error = outcome(mine(name, {}, workers))
    assert error is None
    assert outcome(mine(name, checked, workers)) == (full, None)
    for k in POSITIONS:
        if k > len(full):
            continue
        for made, resumed in (({}, checked), (checked, {}), (checked, checked)):
            state = _state_after(mine(name, made, workers), k)
            assert _tail_after(mine(name, resumed, workers), k, state) == (full[k:], None), (k, made)


@pytest.mark.parametrize("workers", [None, 2])
def test_a_state_with_a_batch_after_a_checked_filter_resumes_only_with_checks(
    workers: int | None,
) -> None:
    """A batch after a part's filter runs in order once checks are asked for (the part's
    filter marks what it drops): its state names other operations, so it resumes a run with
    checks, and a run without them refuses it with a ValueError naming them (README), as the
    other way round; never other elements."""

    def pipeline(options: dict[str, Any]) -> Any:
        ds = _with(
            al.MapDataset.range(100).to_iter_dataset().filter(keep(al, "KeepNoThirds")).batch(4),
            al,
            **options,
        )
        return ds if workers is None else ds.prefetch(workers)

    full = outcome(pipeline({}))[0]
    for options in ({WARN: 1.0}, {}):
        state = _state_after(pipeline(options), 2)
        assert _tail_after(pipeline(options), 2, state) == (full[2:], None), options
    for made, resumed in (({WARN: 1.0}, {}), ({}, {WARN: 1.0})):
        state = _state_after(pipeline(made), 2)
        with pytest.raises(ValueError, match="another operations"):
            _tail_after(pipeline(resumed), 2, state)


@pytest.mark.parametrize("workers", [None, 2])
def test_a_resumed_checked_run_raises_where_grain_does(workers: int | None) -> None:
    # Grain 0.2.18 resumed at each position: the windows count from the resume on.
    expected = {0: 500, 333: 499, 499: 499}  # elements before the error
    for k, before in expected.items():
        ds = _with(
            al.MapDataset.range(3000).to_iter_dataset().filter(keep(al, "KeepEven")), al, **{RAISE: 0.5}
        )
        ds = ds if workers is None else ds.prefetch(workers)
        state = _state_after(ds, k)
        got, error = _tail_after(ds, k, state)
        assert (len(got), got[:1]) == (before, [2 * k]), k
        assert error is not None
        assert "skipped 50.00 % of the last seen 1000" in error


# Errors.
@pytest.mark.parametrize("exception", [ValueError, StopIteration, LookupError])
def test_a_filters_error_arrives_the_same_with_and_without_checks(exception: type[BaseException]) -> None:
    def bad(e: int) -> bool:
        if e == 1234:
            raise exception("at 1234")
        return e % 3 != 0

    def run(options: dict[str, Any], workers: int | None) -> tuple[int, Any, str, str]:
        ds = _with(
            al.MapDataset.range(3000).to_iter_dataset().filter(lambda e: e % 5 != 0).map(int).filter(bad),
            al,
            **options,
        )
        got: list[int] = []
        try:
            for e in ds if workers is None else ds.prefetch(workers):
                got.append(e)
        except Exception as error:  # compared below
            return len(got), got[-1], type(error).__name__, str(error).splitlines()[0]
        raise AssertionError("no error")

    expected = run({}, None)
    assert expected[:2] == (658, 1232)
    for options in ({}, {WARN: 0.99}, {RAISE: 0.99}):
        for workers in (None, 0, 2, 3):
            assert run(options, workers) == expected, (options, workers)


# Threads.
def _slow_checked(workers: int) -> Any:
    ds = (
        al.MapDataset.range(400_000)
        .to_iter_dataset()
        .filter(lambda e: e % 3 != 0)
        .map(lambda e: 2 * e)
        .filter(lambda e: e % 5 != 0)
        .batch(4)
    )
    return _with(ds, al, **{RAISE: 0.9, WARN: 0.5}).prefetch(workers)


@repeated
@pytest.mark.parametrize("workers", [0, 1, 3])
def test_close_from_another_thread_while_statistics_are_polled(repeat: int, workers: int) -> None:
    iterator = iter(_slow_checked(workers))
    started, stop = threading.Event(), threading.Event()
    polled: list[int] = []

    def poll() -> None:
        while not stop.is_set():
            polled.append(len(iterator.statistics()))
            started.set()

    def close_after_some() -> None:
        started.wait(5)
        iterator.close()

    threads = [threading.Thread(target=poll), threading.Thread(target=close_after_some)]
    for thread in threads:
        thread.start()
    got = [e.tolist() for e in iterator]  # ends, whatever came before the close
    stop.set()
    for thread in threads:
        thread.join(10)
    reference = iter(_slow_checked(0))
    assert got == [next(reference).tolist() for _ in got]
    reference.close()
    assert polled
    assert min(polled) >= 1


def test_async_for_and_device_put_give_the_same_as_for() -> None:
    name, options = "three filters, a map between", {RAISE: 0.67}
    expected = outcome(mine(name, options, 2))
    assert expected[1] is not None

    async def drain() -> tuple[list[Any], str | None]:
        got: list[Any] = []
        try:
            async for e in mine(name, options, 2):
                got.append(fingerprint(e))
        except ValueError as error:
            return got, f"ValueError: {str(error).split(' elements.')[0]}"
        return got, None

    assert asyncio.run(drain()) == expected
    pytest.importorskip("jax")
    assert outcome(mine(name, options, 2).device_put(al.DevicePut(buffer_size=2))) == expected
    assert outcome(mine("a batch between filters", {RAISE: 0.3}, 2).device_put()) == outcome(
        mine("a batch between filters", {RAISE: 0.3}, None)
    )


def _in_interpreters(executor: str) -> Any:
    # Functions a subinterpreter can take (no NumPy, nothing to import from the tests).
    no_thirds = functools.partial(operator.contains, frozenset(i for i in range(4000) if i % 3))
    no_fifths = functools.partial(operator.contains, frozenset(i for i in range(8000) if i % 5))
    ds = (
        al.MapDataset.range(4000)
        .to_iter_dataset()
        .filter(no_thirds)
        .map(operator.neg)
        .map(abs)
        .filter(no_fifths)
    )
    return _with(ds, al, **{RAISE: 0.3}).prefetch(2, executor=executor)


@pytest.mark.subinterpreters
@pytest.mark.skipif(unavailable() is not None, reason=f"{unavailable()}")
def test_the_interpreter_executor_marks_and_raises_as_threads() -> None:
    got, error = outcome(_in_interpreters("interpreter"))
    assert (got, error) == outcome(_in_interpreters("thread"))
    assert error is not None
    assert "skipped" in error


# Options: merging, Grain's objects, nesting, interleaves, user nodes.
def _drops_half(g: Any) -> Any:
    return g.MapDataset.range(3000).to_iter_dataset()


def _merge_case(g: Any, case: str) -> Any:
    def w(ds: Any, ratio: float | None) -> Any:
        return _with(ds, g, **{RAISE: ratio})

    a, b = _drops_half(g), _drops_half(g)
    if case == "mix, deep set first":
        return g.IterDataset.mix([w(a, None).map(int).map(int), w(b, 0.1)]).filter(keep(g, "KeepEven"))
    if case == "mix, shallow set first":
        return g.IterDataset.mix([w(a, 0.1), w(b, None).map(int).map(int)]).filter(keep(g, "KeepEven"))
    if case == "zip, deep set first":
        return g.experimental.ZipIterDataset([w(a, None).map(int).map(int), w(b, 0.1)]).filter(
            keep(g, "KeepEven")
        )
    if case == "nested, outer None wins":
        return w(_with(w(a, 0.1).filter(keep(g, "KeepEven")), g, **{WARN: 0.5}), None)
    if case == "interleave's inner options stay inside":
        return g.experimental.InterleaveIterDataset([w(a, 0.1)], cycle_length=1).filter(keep(g, "KeepEven"))
    if case == "interleave's outer options reach inside":
        return w(g.experimental.InterleaveIterDataset([a.filter(keep(g, "KeepEven"))], cycle_length=1), 0.1)
    assert case == "interleave, outer None over inner"
    inner = w(a.filter(keep(g, "KeepEven")), 0.1)
    return w(g.experimental.InterleaveIterDataset([inner], cycle_length=1), None)


MERGES = {  # Grain 0.2.18: elements before the error (None: no error, 1500 elements)
    "mix, deep set first": None,
    "mix, shallow set first": 500,
    "zip, deep set first": None,
    "nested, outer None wins": None,
    "interleave's inner options stay inside": None,
    "interleave's outer options reach inside": 500,
    "interleave, outer None over inner": None,
}


@pytest.mark.parametrize("case", sorted(MERGES))
def test_options_merge_across_the_graph_as_grains(case: str) -> None:
    """Grain merges each iterator's parents in order, the first one's set fields winning,
    whatever the depth at which each set them; the node above them wins over both."""
    got, error = outcome(_merge_case(al, case))
    before = MERGES[case]
    if before is None:
        assert error is None
    else:
        assert (len(got), error is not None) == (before, True)


def test_the_merge_table_is_grains(grain: ModuleType) -> None:
    for case, before in MERGES.items():
        got, error = outcome(_merge_case(grain, case))
        assert (error is None) == (before is None), case
        if before is not None:
            assert len(got) == before, case


def _user_node(g: Any) -> Any:
    class PassOn(g.DatasetIterator):  # type: ignore[misc]
        def __next__(self) -> Any:
            return next(self._parent)

        def get_state(self) -> Any:
            return self._parent.get_state()

        def set_state(self, state: Any) -> None:
            self._parent.set_state(state)

    class Pass(g.IterDataset):  # type: ignore[misc]
        def __iter__(self) -> Any:
            return PassOn(self._parent.__iter__())

    return Pass


def test_options_above_a_users_node_reach_the_filters_below_it() -> None:
    """Grain: a user's iterator shares its parents' context, so options set above it reach
    the filters below (Grain raises after 500 elements here)."""
    inner = al.MapDataset.range(3000).to_iter_dataset().filter(keep(al, "KeepEven"))
    got, error = outcome(_with(_user_node(al)(inner), al, **{RAISE: 0.4}))
    assert (len(got), error is not None) == (500, True)


def test_a_users_node_is_grains(grain: ModuleType) -> None:
    inner = grain.MapDataset.range(3000).to_iter_dataset().filter(keep(grain, "KeepEven"))
    got, error = outcome(_with(_user_node(grain)(inner), grain, **{RAISE: 0.4}))
    assert (len(got), error is not None) == (500, True)


def test_grains_options_object_and_its_merge(grain: ModuleType) -> None:
    theirs = grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5, min_shm_size=3)
    ds = WithOptionsIterDataset(
        al.MapDataset.range(3000).to_iter_dataset().filter(keep(al, "KeepEven")), theirs
    )
    assert ds.options == DatasetOptions(filter_raise_threshold_ratio=0.5, min_shm_size=3)
    assert len(outcome(ds)[0]) == 500
    # Grain's own merged object: every field the user set on either side.
    merged = grain.experimental.DatasetOptions(filter_warn_threshold_ratio=None).merge(theirs)
    assert WithOptionsIterDataset(ds, merged).options.user_set_fields == {WARN, RAISE, "min_shm_size"}


# Holes: a MapDataset's map that returns None leaves a hole, as a filter does.
def _holes(g: Any) -> Any:
    return g.MapDataset.range(3000).map(lambda v: None if v % 3 == 0 else v).to_iter_dataset()


@pytest.mark.parametrize("workers", [None, 2])
def test_holes_a_map_leaves_are_checked_as_grain_checks_them(workers: int | None) -> None:
    ds = _with(_holes(al), al, **{RAISE: 0.3})
    got, error = outcome(ds if workers is None else ds.prefetch(workers))
    # Grain 0.2.18: the first window of 1000 records holds 334 holes.
    assert len(got) == 666
    assert error == (
        "ValueError: Transformation PrefetchDatasetIterator(read_options=ReadOptions(num_threads=16, "
        "prefetch_buffer_size=500), allow_nones=False) skipped 33.40 % of the last seen 1000"
    )


def test_map_with_index_after_holes_a_map_leaves_counts_as_grain() -> None:
    got = list(_holes(al).map_with_index(_pair))[:4]
    assert got == [(0, 1), (1, 2), (2, 4), (3, 5)]  # Grain 0.2.18's count of the elements


def test_holes_a_map_leaves_are_grains(grain: ModuleType) -> None:
    got, error = outcome(_with(_holes(grain), grain, **{RAISE: 0.3}))
    assert len(got) == 666
    assert error is not None
    assert list(_holes(grain).map_with_index(_pair))[:4] == [(0, 1), (1, 2), (2, 4), (3, 5)]


# Hostile arguments.
@pytest.mark.parametrize(
    "ratio", [np.float32(0.5), np.float16(0.5), np.int64(1), np.float64(0.25)], ids=lambda r: type(r).__name__
)
def test_a_numpy_ratio_is_a_number(ratio: Any) -> None:
    options = DatasetOptions(filter_raise_threshold_ratio=ratio, filter_warn_threshold_ratio=ratio)
    assert options.filter_raise_threshold_ratio == float(ratio)


def test_dataclasses_replace_makes_new_options() -> None:
    options = dataclasses.replace(DatasetOptions(min_shm_size=3), filter_raise_threshold_ratio=0.5)
    assert (options.min_shm_size, options.filter_raise_threshold_ratio) == (3, 0.5)


@pytest.mark.parametrize(
    ("make", "kind", "message"),
    [
        (lambda: DatasetOptions(filter_raise_threshold_ratio=float("inf")), ValueError, RAISE),
        (lambda: DatasetOptions(filter_raise_threshold_ratio=-0.1), ValueError, RAISE),
        (lambda: DatasetOptions(filter_warn_threshold_ratio=_bad(np.bool_(True))), TypeError, WARN),
        (lambda: DatasetOptions(filter_warn_threshold_ratio=_bad([0.5])), TypeError, WARN),
        (lambda: DatasetOptions(min_shm_size=_bad(1.0)), TypeError, "min_shm_size"),
        (lambda: DatasetOptions(min_shm_size=True), TypeError, "min_shm_size"),
        (lambda: DatasetOptions(execution_tracking_mode=_bad(1)), TypeError, "execution_tracking_mode"),
        (lambda: DatasetOptions(**_bad({"nope": 1})), TypeError, "nope"),
        (lambda: WithOptionsIterDataset(_bad([1, 2]), DatasetOptions()), TypeError, "parent"),
        (
            lambda: WithOptionsIterDataset(al.MapDataset.range(3).to_iter_dataset(), _bad(None)),
            TypeError,
            "options",
        ),
        (
            lambda: x.multithread_prefetch(al.MapDataset.range(3).to_iter_dataset(), -1, 2),
            ValueError,
            "num_threads",
        ),
        (
            lambda: x.multithread_prefetch(al.MapDataset.range(3).to_iter_dataset(), True, 2),
            TypeError,
            "num_threads",
        ),
        (
            lambda: x.multithread_prefetch(al.MapDataset.range(3).to_iter_dataset(), 2, _bad(None)),
            TypeError,
            "buffer_size",
        ),
        (
            lambda: x.multithread_prefetch(al.MapDataset.range(3).to_iter_dataset(), 2, 2, _bad(1)),
            TypeError,
            "sequential",
        ),
        (lambda: x.multithread_prefetch(_bad(al.MapDataset.range(3)), 2, 2), TypeError, "`ds`"),
        (lambda: x.multithread_prefetch(_bad([1, 2]), 0, 2), TypeError, "`ds`"),
        (
            lambda: x.pick_performance_config(None, ram_budget_mb=1, max_workers=2, max_buffer_size=2),
            TypeError,
            "`ds`",
        ),
        (lambda: _pick(ram_budget_mb=0), ValueError, "ram_budget_mb"),
        (lambda: _pick(ram_budget_mb=True), TypeError, "ram_budget_mb"),
        (lambda: _pick(max_workers=0), ValueError, "max_workers"),
        (lambda: _pick(max_buffer_size=-1), ValueError, "max_buffer_size"),
        (lambda: _pick(samples_to_check=0), ValueError, "samples_to_check"),
        (lambda: al.config.update("py_debug_mode", 1), ValueError, "py_debug_mode"),
        (lambda: al.config.update("tf_lookup_batch_size", 2.0), ValueError, "tf_lookup_batch_size"),
        (lambda: al.config.update("nope", 1), ValueError, "nope"),
    ],
    ids=lambda case: case if isinstance(case, str) else "",
)
def test_bad_arguments_are_named(make: Callable[[], Any], kind: type[Exception], message: str) -> None:
    with pytest.raises(kind, match=message):
        make()
    assert al.config.py_debug_mode is False


def _bad(value: Any) -> Any:
    """A hostile argument, past the type checker."""
    return value


def _pick(ds: Any = None, **arguments: Any) -> Any:
    given = {"ram_budget_mb": 1, "max_workers": 4, "max_buffer_size": None} | arguments
    return x.pick_performance_config(ds or al.MapDataset.range(10).to_iter_dataset(), **given)


def test_multithread_prefetch_keeps_the_order_and_the_options() -> None:
    ds = _with(al.MapDataset.range(3000).to_iter_dataset(), al, **{RAISE: 0.4})
    for threads in (0, 1, 3):
        got, error = outcome(x.multithread_prefetch(ds, threads, 0).filter(keep(al, "KeepEven")))
        assert (got[:3], len(got), error is not None) == ([0, 2, 4], 500, True)


def _sizes(g: Any) -> dict[str, Any]:
    source = g.MapDataset.source
    part = source([np.zeros(4096, np.uint8)] * 10).to_iter_dataset()
    return {
        "fewer elements than samples_to_check": source([np.zeros(1000, np.uint8)] * 3).to_iter_dataset(),
        "sizes 1000 and 1001": source(
            [np.zeros(1000 + i % 2, np.uint8) for i in range(10)]
        ).to_iter_dataset(),
        "NumPy scalars": source([np.float32(i) for i in range(10)]).to_iter_dataset(),
        "one part read twice": g.IterDataset.mix([part, part]),
        "dicts of arrays": source([{"a": np.zeros(100), "b": [np.zeros(7)]}] * 10).to_iter_dataset(),
        "batched": source([np.zeros(1000, np.uint8)] * 20).to_iter_dataset().batch(4),
        "empty": source([np.zeros(10, np.uint8)] * 3).filter(lambda _: False).to_iter_dataset(),
    }


GRAINS_PICKS = {  # Grain 0.2.18, ram_budget_mb=2, max_workers=max_buffer_size=10**6
    "fewer elements than samples_to_check": (10**6, 10**6),
    "sizes 1000 and 1001": (2096, 2096),
    "NumPy scalars": (74898, 74898),
    "one part read twice": (512, 256),
    "dicts of arrays": (2449, 2449),
    "batched": (524, 2097),
    "empty": (10**6, 10**6),
}


def _picked(g: Any, ds: Any) -> tuple[int, int]:
    config = g.experimental.pick_performance_config(
        ds, ram_budget_mb=2, max_workers=10**6, max_buffer_size=10**6
    )
    return config.multiprocessing_options.num_workers, config.read_options.prefetch_buffer_size


@pytest.mark.parametrize("case", sorted(GRAINS_PICKS))
def test_pick_performance_config_answers_grains(case: str) -> None:
    expected = GRAINS_PICKS[case]
    if case == "NumPy scalars":  # sys.getsizeof of a scalar: 28 bytes on 3.11, 44 on 3.13t
        scalar = int(2 * 2**20 / sys.getsizeof(np.float32(0)))
        expected = (scalar, scalar)
    assert _picked(al, _sizes(al)[case]) == expected


def test_grains_picks_are_these(grain: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="absl")  # Grain's warnings of few samples; restored after
    assert {case: _picked(grain, ds) for case, ds in _sizes(grain).items()} == GRAINS_PICKS


def test_pick_performance_config_without_a_budget_and_on_running_pipelines() -> None:
    config = _pick(ram_budget_mb=None, max_workers=3, max_buffer_size=7)
    assert (config.multiprocessing_options.num_workers, config.read_options.prefetch_buffer_size) == (3, 7)
    endless = al.MapDataset.range(3).repeat().to_iter_dataset().prefetch(2)
    config = _pick(endless, max_workers=5)
    assert config.multiprocessing_options.num_workers == 5


def test_the_checkpoint_check_passes_checked_pipelines_and_fails_a_bad_one() -> None:
    for name in ("three filters, a map between", "a batch between filters", "mix, then a filter"):
        for workers in (None, 2):
            ds = x.LimitIterDataset(mine(name, {WARN: 1.0}, workers), count=25)
            x.assert_equal_output_after_checkpoint(ds)

    class Forgets(al.DatasetIterator[int]):
        def __init__(self) -> None:
            super().__init__()
            self._i = 0

        def __next__(self) -> int:
            if self._i >= 5:
                raise StopIteration
            self._i += 1
            return self._i

        def get_state(self) -> dict[str, int]:
            return {"i": self._i}

        def set_state(self, state: Any) -> None:
            pass  # forgets: starts over

    class ForgetsDataset(al.IterDataset[int]):
        def __iter__(self) -> Forgets:
            return Forgets()

    with pytest.raises(AssertionError):
        x.assert_equal_output_after_checkpoint(ForgetsDataset())
    with pytest.raises(AssertionError, match="no elements"):
        x.assert_equal_output_after_checkpoint(al.MapDataset.range(0).to_iter_dataset())


def test_config_debug_mode_round_trip_leaves_the_log_interval() -> None:
    from aioloader._observability import logs

    before = logs.interval
    try:
        al.config.update("py_debug_mode", True)
        assert al.config.py_debug_mode is True
        al.config.update("py_debug_mode", False)
        assert logs.interval is None
    finally:
        logs.interval = before
        al.config.update("py_debug_mode", False)
        logs.interval = before
