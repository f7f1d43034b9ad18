"""Grain's `experimental.multithread_prefetch`, `assert_equal_output_after_checkpoint` and
`pick_performance_config`.

`multithread_prefetch` runs the parts upstream on threads and never changes the order
(Grain's interleaves a slice per thread: the same order where nothing is filtered or
batched, which the comparison with Grain checks). `assert_equal_output_after_checkpoint` passes
on pipelines that resume exactly and fails on one that does not, or gives nothing.
`pick_performance_config` chooses Grain's workers and read-ahead for a RAM budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader.experimental import (
    DatasetOptions,
    WithOptionsIterDataset,
    assert_equal_output_after_checkpoint,
    multithread_prefetch,
    pick_performance_config,
)


def pipeline(g: Any) -> Any:
    return g.MapDataset.range(200).shuffle(seed=3).map(lambda x: x * 3).to_iter_dataset()


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_multithread_prefetch_gives_grains_elements(grain: ModuleType, threads: int) -> None:
    expected = list(grain.experimental.multithread_prefetch(pipeline(grain), threads, buffer_size=2))
    assert list(multithread_prefetch(pipeline(al), threads, buffer_size=2)) == expected


def test_multithread_prefetch_keeps_the_order_and_the_options() -> None:
    filtered = al.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 7 != 0)
    expected = list(filtered)
    for threads in (0, 1, 3):
        assert list(multithread_prefetch(filtered, threads, 4, sequential_slice=True)) == expected
    assert multithread_prefetch(filtered, 0, 1) is filtered
    # Options set before the prefetch reach a filter after it (Grain's test of the same).
    repeated = al.MapDataset.source([1, 2, 3]).repeat(1000).to_iter_dataset()
    options = DatasetOptions(filter_raise_threshold_ratio=0.1)
    prefetched = multithread_prefetch(WithOptionsIterDataset(repeated, options), 1, 1)
    with pytest.raises(ValueError, match=r"skipped 66\.70 % of the last seen 1000"):
        list(prefetched.filter(lambda x: x > 2))


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        ((-1, 1), ValueError, "`num_threads`"),
        ((2, 1.5), TypeError, "`buffer_size`"),
        ((2, 1, "yes"), TypeError, "`sequential_slice`"),
    ],
)
def test_multithread_prefetch_names_a_bad_argument(
    arguments: tuple[Any, ...], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        multithread_prefetch(pipeline(al), *arguments)


def test_pipelines_that_resume_exactly_pass() -> None:
    assert_equal_output_after_checkpoint(pipeline(al).batch(7, batch_fn=list).prefetch(2))
    mixed = al.IterDataset.mix([pipeline(al), al.MapDataset.range(30).to_iter_dataset()], [0.3, 0.7])
    assert_equal_output_after_checkpoint(mixed)


class Forgetful(al.IterDataset[int]):
    """A user's dataset whose iterator ignores the state it is given."""

    def __iter__(self) -> Any:
        return ForgetfulIterator()


class ForgetfulIterator:
    def __iter__(self) -> ForgetfulIterator:
        return self

    def __init__(self) -> None:
        self._items: Iterator[int] = iter(range(5))
        self._given = 0

    def __next__(self) -> int:
        self._given += 1
        return next(self._items)

    def get_state(self) -> dict[str, int]:
        return {"given": self._given}

    def set_state(self, state: dict[str, int]) -> None:
        self._given = state["given"]  # the position is not restored: the elements start over


def test_a_pipeline_that_does_not_resume_fails() -> None:
    with pytest.raises(AssertionError, match="the elements after the state of step 1 differ"):
        assert_equal_output_after_checkpoint(Forgetful())
    with pytest.raises(AssertionError, match="gave no elements"):
        assert_equal_output_after_checkpoint(al.MapDataset.range(0).to_iter_dataset())


def sized(g: Any) -> Any:
    """Batches of 4 records of 1 MiB, from a MapDataset with holes and one without, mixed."""
    arrays = g.MapDataset.source([np.full((256, 1024), i, np.float32) for i in range(40)])
    kept = arrays.filter(lambda x: bool(x[0, 0] % 3)).to_iter_dataset().batch(4)
    return g.IterDataset.mix([kept, arrays.to_iter_dataset().batch(2)])


@pytest.mark.parametrize(
    ("budget", "workers", "buffer"), [(64, 8, None), (1024, 3, None), (16, 2, 10), (10_000, 4, 50), (3, 1, 7)]
)
def test_pick_performance_config_chooses_as_grain(
    grain: ModuleType, budget: int, workers: int, buffer: int | None
) -> None:
    def chosen(g: Any) -> tuple[int, int]:
        config = g.experimental.pick_performance_config(
            sized(g), ram_budget_mb=budget, max_workers=workers, max_buffer_size=buffer
        )
        return config.multiprocessing_options.num_workers, config.read_options.prefetch_buffer_size

    assert chosen(al) == chosen(grain)


def test_pick_performance_config_takes_no_budget_and_names_bad_arguments() -> None:
    config = pick_performance_config(sized(al), ram_budget_mb=None, max_workers=3, max_buffer_size=None)
    assert (config.multiprocessing_options, config.read_options) == (
        al.MultiprocessingOptions(num_workers=3),
        al.ReadOptions(prefetch_buffer_size=1000),
    )
    np.testing.assert_equal(list(sized(al).mp_prefetch(config.multiprocessing_options)), list(sized(al)))
    for name, arguments in [
        ("ram_budget_mb", {"ram_budget_mb": 0, "max_workers": 1, "max_buffer_size": 1}),
        ("max_workers", {"ram_budget_mb": 1, "max_workers": 1.5, "max_buffer_size": 1}),
        ("max_buffer_size", {"ram_budget_mb": 1, "max_workers": 1, "max_buffer_size": -1}),
        (
            "samples_to_check",
            {"ram_budget_mb": 1, "max_workers": 1, "max_buffer_size": 1, "samples_to_check": 0},
        ),
    ]:
        with pytest.raises((TypeError, ValueError), match=f"`{name}`"):
            pick_performance_config(sized(al), **arguments)
