"""`DatasetOptions` and `WithOptionsIterDataset`: Grain's filter checks, for any worker count.

A filter that drops at least `filter_raise_threshold_ratio` of a window of 1000
elements raises a ValueError at the element that fills the window, as Grain's does:
the elements before it, the error's text and where it comes are compared with Grain
0.2.18 (3.11) and between worker counts (every build). The options reach every
filter of the pipeline, before and after the node, merged as Grain merges them; a
warning ratio of the user's replaces the default one; states resume the same way
with and without checks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader._executors.interpreter.subinterpreters import unavailable
from aioloader.experimental import DatasetOptions, ExecutionTrackingMode, WithOptionsIterDataset
from tests.support.transforms import is_long, shout

RAISE = "filter_raise_threshold_ratio"
WARN = "filter_warn_threshold_ratio"


CONDITIONS: dict[str, Callable[[int], bool]] = {
    "KeepEven": lambda element: int(np.asarray(element).flat[0]) % 2 == 0,
    "KeepNoTens": lambda element: element % 10 != 0,
    "KeepBelow500": lambda element: element < 500,
    "KeepNoThirds": lambda element: element % 3 != 0,
    "KeepNoFifths": lambda element: element % 5 != 0,
}


def keep(g: Any, name: str) -> Any:
    """A filter object of `g`'s Filter class named `name` (Grain's messages name the class)."""
    condition = CONDITIONS[name]
    return type(name, (g.transforms.Filter,), {"filter": lambda self, element: condition(element)})()


def double(g: Any) -> Any:
    return type("Double", (g.transforms.Map,), {"map": lambda self, element: 2 * element})()


# Each pipeline over a module `g` of Grain's names (grain, or aioloader), with the
# options module `x` (grain.experimental or aioloader.experimental) and a raise ratio.
Build = Callable[[Any, Any, float | None], Any]


def _with(x: Any, ds: Any, ratio: float | None) -> Any:
    return x.WithOptionsIterDataset(ds, x.DatasetOptions(filter_raise_threshold_ratio=ratio))


PIPELINES: dict[str, Build] = {
    "MapDataset filter, holes dropped": lambda g, x, r: _with(
        x, g.MapDataset.range(3000).filter(keep(g, "KeepEven")).to_iter_dataset(), r
    ),
    "IterDataset filter": lambda g, x, r: _with(
        x, g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepEven")), r
    ),
    "filter keeps the window's last": lambda g, x, r: _with(
        x, g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepNoTens")), r
    ),
    "second window": lambda g, x, r: _with(
        x, g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepBelow500")), r
    ),
    "options inside, filter after": lambda g, x, r: (
        _with(x, g.MapDataset.range(3000).to_iter_dataset(), r).filter(keep(g, "KeepEven")).map(double(g))
    ),
    "three filters, a map, a batch": lambda g, x, r: _with(
        x,
        g.MapDataset.range(5000)
        .filter(keep(g, "KeepNoThirds"))
        .to_iter_dataset()
        .filter(keep(g, "KeepEven"))
        .map(double(g))
        .filter(keep(g, "KeepNoFifths"))
        .batch(7),
        r,
    ),
    "batch, then a filter of batches": lambda g, x, r: _with(
        x, g.MapDataset.range(30000).to_iter_dataset().batch(3).filter(keep(g, "KeepEven")), r
    ),
    "mix, a filter in a branch and after": lambda g, x, r: _with(
        x,
        g.IterDataset.mix(
            [
                g.MapDataset.range(3000).to_iter_dataset().filter(keep(g, "KeepEven")),
                g.MapDataset.range(3000).to_iter_dataset(),
            ]
        ).filter(keep(g, "KeepNoThirds")),
        r,
    ),
}
RATIOS = (None, 0.0, 0.1, 0.33, 0.5, 0.6, 0.7, 1.0)


def outcome(ds: Any) -> tuple[list[Any], str | None]:
    """The elements before the end or the error, and the error's type and first sentence."""
    elements: list[Any] = []
    try:
        for element in ds:
            elements.append(np.asarray(element).tolist())
    except Exception as error:  # compared, not swallowed
        return elements, f"{type(error).__name__}: {str(error).split(' elements.')[0]}"
    return elements, None


def aioloader_outcome(name: str, ratio: float | None, workers: int) -> tuple[list[Any], str | None]:
    ds = PIPELINES[name](al, al.experimental, ratio)
    return outcome(ds.prefetch(workers) if workers else ds)


@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_elements_and_the_error_are_grains(grain: ModuleType, name: str, ratio: float | None) -> None:
    expected = outcome(PIPELINES[name](grain, grain.experimental, ratio))
    assert aioloader_outcome(name, ratio, 0) == expected


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_any_worker_count_raises_at_the_same_element(name: str, workers: int) -> None:
    for ratio in (0.1, 0.5, 0.7):
        assert aioloader_outcome(name, ratio, workers) == aioloader_outcome(name, ratio, 0)


def test_the_checks_fire_where_grains_tests_expect() -> None:
    ds = al.MapDataset.range(3000).filter(keep(al, "KeepBelow500")).to_iter_dataset()
    elements, error = outcome(_with(al.experimental, ds, 0.6).prefetch(2))
    assert elements == list(range(500))  # the first window dropped half: below 0.6
    assert error == (
        "ValueError: Transformation PrefetchDatasetIterator(read_options=ReadOptions(num_threads=16, "
        "prefetch_buffer_size=500), allow_nones=False) skipped 100.00 % of the last seen 1000"
    )
    # allow_nones keeps the holes: nothing is dropped, nothing checked (Grain's test).
    kept = al.MapDataset.range(1000).filter(lambda _: False).to_iter_dataset(allow_nones=True)
    assert list(_with(al.experimental, kept, 0.9)) == [None] * 1000


def test_options_reach_an_interleaves_datasets() -> None:
    dropped = al.MapDataset.source([1]).repeat(1000).to_iter_dataset().filter(lambda _: False)
    kept = al.MapDataset.source([2]).repeat(1000).to_iter_dataset()
    ds = al.experimental.InterleaveIterDataset([dropped, kept], cycle_length=1)
    with pytest.raises(ValueError, match=r"skipped 100\.00 %"):
        list(_with(al.experimental, ds, 0.1))
    assert len(list(ds)) == 1000  # without the options: no check


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_resumes_and_the_windows_count_from_there(workers: int) -> None:
    def pipeline(ratio: float | None) -> al.IterDataset[Any]:
        ds = _with(
            al.experimental,
            al.MapDataset.range(4000).to_iter_dataset().filter(keep(al, "KeepBelow500")),
            ratio,
        )
        return ds.prefetch(workers)

    iterator = iter(pipeline(0.6))
    first = [next(iterator) for _ in range(300)]
    state = iterator.get_state()
    iterator.close()
    resumed = iter(pipeline(0.6))
    resumed.set_state(state)
    # From element 300 on, the first window (300..1299) drops 800: the error comes after
    # the 200 elements left below 500, where an uninterrupted run raised after 500 too.
    elements, error = outcome(resumed)
    assert first + elements == list(range(500))
    assert error is not None
    assert "skipped 80.00 % of the last seen 1000" in error
    # The state is the same with and without checks: each resumes the other's.
    unchecked = iter(pipeline(None))
    unchecked.set_state(state)
    assert list(unchecked) == list(range(300, 500))


def test_async_for_and_device_put_raise_at_the_same_element() -> None:
    import asyncio

    def pipeline() -> al.IterDataset[Any]:
        return _with(
            al.experimental, al.MapDataset.range(3000).to_iter_dataset().filter(keep(al, "KeepNoTens")), 0.1
        ).prefetch(2)

    async def drain() -> tuple[list[Any], str | None]:
        got: list[Any] = []
        try:
            async for element in pipeline():
                got.append(element)
        except ValueError as error:
            return got, str(error)
        return got, None

    elements, error = asyncio.run(drain())
    assert elements == [i for i in range(999) if i % 10]
    assert error is not None
    assert error.startswith("Transformation FilterDatasetIterator(transform=KeepNoTens)")
    jax = pytest.importorskip("jax")
    on_device = pipeline().device_put(al.DevicePut(buffer_size=2))
    got, error = outcome(on_device)
    assert (got, error) == ([i for i in range(999) if i % 10], error)
    assert error is not None
    assert "skipped 10.00 %" in error
    with iter(on_device) as iterator:
        assert isinstance(next(iterator), jax.Array)


def test_a_warning_ratio_of_the_users_replaces_the_default(caplog: pytest.LogCaptureFixture) -> None:
    def run(options: DatasetOptions | None) -> list[str]:
        caplog.clear()
        ds = al.MapDataset.range(2000).to_iter_dataset().filter(keep(al, "KeepNoThirds")).prefetch(2)
        with caplog.at_level(logging.WARNING, logger="aioloader"):
            list(ds if options is None else WithOptionsIterDataset(ds, options))
        return [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]

    assert run(DatasetOptions(filter_warn_threshold_ratio=0.3)) == [
        "Transformation FilterDatasetIterator(transform=KeepNoThirds) skipped 33.40 % of the last seen 1000 "
        "elements. Please check the filtering logic; if it is meant, consider filtering the dataset "
        "once before training. To turn this warning off, set `filter_warn_threshold_ratio` to None in "
        "the DatasetOptions given to WithOptionsIterDataset."
    ]  # once: at most one warning a minute
    assert run(DatasetOptions(filter_warn_threshold_ratio=0.4)) == []
    assert run(None) == []  # the default 0.9


def test_none_turns_the_default_warning_off(caplog: pytest.LogCaptureFixture) -> None:
    nothing = al.MapDataset.range(3000).to_iter_dataset().filter(lambda _: False).prefetch(2)
    with caplog.at_level(logging.WARNING, logger="aioloader"):
        assert list(nothing) == []
    engines = [r.getMessage() for r in caplog.records]  # the engine's warning, at 0.9
    assert any("skipped 100.00 % of the last seen" in message for message in engines)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aioloader"):
        assert list(WithOptionsIterDataset(nothing, DatasetOptions(filter_warn_threshold_ratio=None))) == []
    assert not caplog.records
    # An in-order filter (after a mix) warns at Grain's default 0.9 too.
    mixed = al.IterDataset.mix([al.MapDataset.range(3000).to_iter_dataset()]).filter(lambda _: False)
    with caplog.at_level(logging.WARNING, logger="aioloader"):
        assert list(mixed) == []
    assert any("skipped 100.00 % of the last seen 1000" in r.getMessage() for r in caplog.records)


def test_merging_follows_grain(grain: ModuleType) -> None:
    def fields(options: Any) -> tuple[Any, ...]:
        return (
            options.filter_warn_threshold_ratio,
            options.filter_raise_threshold_ratio,
            options.min_shm_size,
        )

    settings: list[dict[str, Any]] = [
        {},
        {WARN: 0.1},
        {RAISE: 0.2, WARN: None},
        {"min_shm_size": 4},
        {RAISE: None},
    ]
    for mine in settings:
        for theirs in settings:
            expected = grain.experimental.DatasetOptions(**mine).merge(
                grain.experimental.DatasetOptions(**theirs)
            )
            got = DatasetOptions(**mine).merge(DatasetOptions(**theirs))
            assert fields(got) == fields(expected)
            assert got.user_set_fields == expected._user_set_fields
    assert DatasetOptions().merge(None) == DatasetOptions()
    assert DatasetOptions().execution_tracking_mode is ExecutionTrackingMode.DISABLED
    # A shared library may build the options with Grain's classes: taken field by field.
    theirs = grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.1)
    ds = WithOptionsIterDataset(
        al.MapDataset.range(3000).to_iter_dataset().filter(keep(al, "KeepEven")), theirs
    )
    assert ds.options == DatasetOptions(filter_raise_threshold_ratio=0.1)
    assert outcome(ds)[1] is not None
    grains = grain.experimental.ExecutionTrackingMode.STAGE_TIMING
    assert (
        DatasetOptions(execution_tracking_mode=grains).execution_tracking_mode
        is ExecutionTrackingMode.STAGE_TIMING
    )


def test_the_outer_options_win_and_inner_ones_fill_in() -> None:
    inner = _with(al.experimental, al.MapDataset.range(3000).to_iter_dataset(), 0.1).filter(
        keep(al, "KeepEven")
    )
    assert outcome(_with(al.experimental, inner, None))[1] is None  # the outer None wins: no raise
    outer = WithOptionsIterDataset(inner, DatasetOptions(filter_warn_threshold_ratio=0.2))
    assert outcome(outer)[1] is not None  # the inner raise ratio stays


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: DatasetOptions(filter_raise_threshold_ratio=1.5),
            ValueError,
            "`filter_raise_threshold_ratio`",
        ),
        (
            lambda: DatasetOptions(filter_warn_threshold_ratio=float("nan")),
            ValueError,
            "`filter_warn_threshold_ratio`",
        ),
        (
            lambda: DatasetOptions(filter_warn_threshold_ratio="0.5"),
            TypeError,
            "`filter_warn_threshold_ratio`",
        ),
        (
            lambda: DatasetOptions(filter_raise_threshold_ratio=True),
            TypeError,
            "`filter_raise_threshold_ratio`",
        ),
        (
            lambda: DatasetOptions(execution_tracking_mode="STAGE_TIMING"),
            TypeError,
            "`execution_tracking_mode`",
        ),
        (lambda: DatasetOptions(min_shm_size=-1), ValueError, "`min_shm_size`"),
        (lambda: DatasetOptions(0.5), TypeError, "positional"),  # keyword-only, as Grain's
        (lambda: DatasetOptions().merge({}), TypeError, "`other`"),
        (
            lambda: WithOptionsIterDataset(al.MapDataset.range(3).to_iter_dataset(), {}),
            TypeError,
            "`options`",
        ),
    ],
)
def test_bad_options_are_named(make: Callable[[], Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()


def test_a_close_from_another_thread_ends_a_checked_run() -> None:
    gate = threading.Event()

    class Slow(al.FilterTransform):
        def filter(self, element: int) -> bool:
            gate.wait(5)
            return element % 2 == 0

    ds = _with(al.experimental, al.MapDataset.range(100_000).to_iter_dataset().filter(Slow()), 0.9).prefetch(
        2
    )
    iterator = iter(ds)
    closer = threading.Timer(0.05, lambda: (iterator.close(), gate.set()))
    closer.start()
    got = list(iterator)  # ends, whatever it gave before the close
    closer.join()
    assert got == list(range(0, 2 * len(got), 2))


@pytest.mark.subinterpreters
@pytest.mark.skipif(unavailable() is not None, reason=f"{unavailable()}")
def test_the_interpreter_executor_raises_at_the_same_element() -> None:
    def pipeline(executor: str) -> al.IterDataset[Any]:
        words = al.MapDataset.source([f"w{i}" * (i % 4) for i in range(3000)]).to_iter_dataset()
        return _with(al.experimental, words.filter(is_long).map(shout), 0.2).prefetch(2, executor=executor)

    elements, error = outcome(pipeline("interpreter"))
    assert (elements, error) == outcome(pipeline("thread"))
    assert len(elements) == 746
    assert error is not None
    assert "skipped 25.30 %" in error
