"""Contract 3: a slow consumer makes the pipeline wait; what is in flight stays bounded.

Records are counted in when the source or a flat-map makes them and out when
the consumer receives them or a filter or flat-map drops them, so the tests
measure exactly how many records the pipeline holds at its worst, whatever it
holds them in. Separately, a closed iterator must hold none at all (checked
with `__del__`, after a garbage collection).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable
from typing import Any

import pytest

from aioloader import Batch, DataLoader, FilterTransform, FlatMapTransform, IndexSampler, ReadOptions
from tests.conftest import repeated
from tests.support.tracked import Ledger, Tracked, TrackedSource, bound


class KeepTwoThirds(FilterTransform):
    def filter(self, element: Tracked) -> bool:
        keep = element.value % 3 != 0
        if not keep:
            Ledger.change(held=-1)
        return keep


class UpToThree(FlatMapTransform):
    def flat_map(self, element: Tracked) -> Iterable[Tracked]:
        children = [Tracked(element.value * 10 + k) for k in range(element.value % 4)]
        Ledger.change(held=-1)
        return children


def delivered(output: Any) -> int:
    return len(output) if isinstance(output, list) else 1


def peak_while_consuming_slowly(loader: DataLoader, outputs: int = 400) -> int:
    """Consume `outputs` slowly; return the most records the pipeline held at once.

    Then close the iterator and check that it holds no record any more.
    """
    Ledger.start()
    iterator = iter(loader)
    for _ in range(outputs):
        time.sleep(0.0005)  # a slow training step: only gives the pipeline more time to run ahead
        Ledger.change(held=-delivered(next(iterator)))
    iterator.close()
    assert_all_freed()
    return Ledger.peak


def assert_all_freed() -> None:
    """No record is alive: checked after a collection, and on the free-threaded build
    after the deallocations other threads queued for the workers (done as those
    threads finish exiting) have run."""
    deadline = time.monotonic() + 2.0
    while gc.collect() is not None and Ledger.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Ledger.alive == 0, f"{Ledger.alive} records still alive after close()"


def loader(operations: list[Any], workers: int, window: int, worker_buffer_size: int = 1) -> DataLoader:
    return DataLoader(
        data_source=TrackedSource(),
        sampler=IndexSampler(1_000_000, shuffle=True, seed=0, num_epochs=1),
        operations=operations,
        worker_count=workers,
        worker_buffer_size=worker_buffer_size,
        read_options=ReadOptions(prefetch_buffer_size=window),
    )


@repeated
@pytest.mark.parametrize("workers", [0, 1, 2, 4])
@pytest.mark.parametrize("window", [8, 100])
def test_records_in_flight_are_bounded_by_the_prefetch_buffer(workers: int, window: int, repeat: int) -> None:
    assert peak_while_consuming_slowly(loader([], workers, window)) <= bound(window, workers)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_bounded_too(workers: int) -> None:
    peak = peak_while_consuming_slowly(loader([Batch(10, batch_fn=list)], workers, 50), 100)
    assert peak <= bound(50, workers, per_output=10)


@pytest.mark.parametrize("worker_buffer_size", [0, 3])
def test_worker_buffer_size_adds_finished_outputs_per_worker_to_the_bound(worker_buffer_size: int) -> None:
    operations = [Batch(4, batch_fn=list)]
    peak = peak_while_consuming_slowly(loader(operations, 2, 8, worker_buffer_size), 100)
    assert peak <= bound(8, 2, 4, worker_buffer_size)


@pytest.mark.parametrize("workers", [0, 2])
def test_no_prefetch_buffer_and_no_worker_buffer_holds_one_chunk_at_a_time(workers: int) -> None:
    # Grain's prefetch_buffer_size=0 (no read-ahead) with nothing buffered per worker.
    operations = [Batch(4, batch_fn=list)]
    assert peak_while_consuming_slowly(loader(operations, workers, 0, worker_buffer_size=0), 50) <= 4


def test_a_batch_larger_than_the_buffer_still_flows_one_at_a_time() -> None:
    # Granted because nothing else is in flight: one batch at a time.
    peak = peak_while_consuming_slowly(loader([Batch(64, batch_fn=list)], 2, 10, worker_buffer_size=0), 30)
    assert peak <= 64


@repeated
@pytest.mark.parametrize("workers", [0, 2])
def test_the_tail_plan_is_bounded_by_records_plus_batches(workers: int, repeat: int) -> None:
    window, size, fan_out = 60, 5, 3
    operations = [KeepTwoThirds(), UpToThree(), Batch(size, batch_fn=list)]
    records = bound(window, workers, per_output=size)  # the first stage's window
    expected_bound = (
        records * fan_out  # stage 1: the records read, or the elements they became
        + (size - 1)  # the ordered tail: less than one batch
        + (records // size) * size  # stage 2: the batches' own window
    )
    assert peak_while_consuming_slowly(loader(operations, workers, window), 300) <= expected_bound
