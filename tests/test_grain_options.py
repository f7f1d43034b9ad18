"""Grain's loader options with Grain's meaning: `ReadOptions` zeros, `worker_buffer_size`, `shard_options`.

`ReadOptions(num_threads=0)` reads in the worker (no read threads),
`prefetch_buffer_size=0` reads nothing ahead, negative values are a
ValueError and a buffer smaller than the threads logs Grain's warning; the
DataLoader takes `worker_buffer_size=` and `shard_options=` as Grain's does.
Where Grain is installed (3.11), its own classes are the reference.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

import pytest

import aioloader as al
from aioloader._program import read_pool
from tests.conftest import aioloader_threads
from tests.grain_reference import grain_python
from tests.support.reference import assert_same_outputs
from tests.test_read_pool import SlowSource, VirtualClock


class CountingSource:
    """Counts its reads, so a test sees how far ahead of the consumer the loader read."""

    def __init__(self, size: int) -> None:
        self.size, self.reads = size, 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        self.reads += 1
        return key


class AsyncCounting:
    """An async source that counts its reads in flight."""

    def __init__(self, size: int) -> None:
        self.size, self.in_flight, self.most_in_flight = size, 0, 0

    def __len__(self) -> int:
        return self.size

    async def aget(self, key: int) -> int:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.0005)
        self.in_flight -= 1
        return key


def read_threads() -> list[threading.Thread]:
    return [t for t in aioloader_threads() if t.name.startswith("aioloader-read")]


@pytest.mark.parametrize("workers", [0, 2])
def test_num_threads_0_reads_in_the_worker_with_no_read_threads(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = VirtualClock()  # reads that each say they took 1 ms, whatever the load
    monkeypatch.setattr(read_pool, "CLOCK", clock)
    source = SlowSource(60, clock)  # slow enough that 16 read threads would be engaged
    sampler = al.IndexSampler(60, shuffle=True, seed=3, num_epochs=1)
    loader = al.DataLoader(
        data_source=source,
        sampler=sampler,
        worker_count=workers,
        read_options=al.ReadOptions(num_threads=0),
    )
    got = []
    with iter(loader) as iterator:
        for item in iterator:
            got.append(item)
            assert read_threads() == []
    assert got == [2 * key for key in sampler.record_keys(0, 60)]
    assert source.most_in_flight <= max(workers, 1)


@pytest.mark.parametrize("workers", [0, 2])
def test_num_threads_0_awaits_an_async_sources_reads_one_at_a_time(workers: int) -> None:
    source = AsyncCounting(40)
    loader = al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(40, num_epochs=1),
        operations=[al.Batch(8)],
        worker_count=workers,
        read_options=al.ReadOptions(num_threads=0),
    )
    assert [batch.tolist() for batch in loader] == [list(range(k, k + 8)) for k in range(0, 40, 8)]
    assert source.most_in_flight == 1


@pytest.mark.parametrize("batch", [None, 3])
def test_prefetch_buffer_size_0_reads_nothing_ahead_of_next(batch: int | None) -> None:
    source = CountingSource(30)
    per_output = batch or 1
    loader = al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(30, num_epochs=1),
        operations=[] if batch is None else [al.Batch(batch)],
        read_options=al.ReadOptions(prefetch_buffer_size=0),
    )
    with iter(loader) as iterator:
        iterator.start_prefetch()  # no read-ahead: nothing to start, as in Grain
        assert source.reads == 0
        for delivered in range(1, 6):
            next(iterator)
            assert source.reads == delivered * per_output


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"num_threads": -1}, "num_threads"), ({"prefetch_buffer_size": -2}, "prefetch_buffer_size")],
)
def test_negative_read_options_are_a_value_error_as_in_grain(kwargs: dict[str, int], name: str) -> None:
    # In Grain's words, which Grain's own tests match.
    value = next(iter(kwargs.values()))
    with pytest.raises(ValueError, match=rf"^ReadOptions: {name} must be non-negative, got {value}\.$"):
        al.ReadOptions(**kwargs)


def test_negative_read_options_are_what_grain_raises_too() -> None:
    gp = grain_python()
    for name in ("num_threads", "prefetch_buffer_size"):
        with pytest.raises(ValueError, match=f"{name} must be non-negative, got -1"):
            gp.ReadOptions(**{name: -1})
        with pytest.raises(ValueError, match=f"{name} must be non-negative, got -1"):
            al.ReadOptions(**{name: -1})


GRAINS_WARNING = (
    "prefetch_buffer_size=4 is smaller than num_threads=16. This will limit the number of threads "
    "that can actually be used in parallel to 4, potentially hurting performance. Please set "
    "prefetch_buffer_size >= num_threads. This warning may become an error in the future."
)


def test_a_buffer_smaller_than_the_threads_logs_grains_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="aioloader"):
        al.ReadOptions(num_threads=16, prefetch_buffer_size=4)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("aioloader", logging.WARNING, GRAINS_WARNING)
    ]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"prefetch_buffer_size": 0}, {"num_threads": 0, "prefetch_buffer_size": 3}, {"num_threads": 4}],
)
def test_no_warning_otherwise(caplog: pytest.LogCaptureFixture, kwargs: dict[str, int]) -> None:
    with caplog.at_level(logging.DEBUG, logger="aioloader"):
        al.ReadOptions(**kwargs)
    assert caplog.records == []


def test_the_warning_is_grains_word_for_word(caplog: pytest.LogCaptureFixture) -> None:
    gp = grain_python()
    with caplog.at_level(logging.WARNING):
        gp.ReadOptions(num_threads=16, prefetch_buffer_size=4)
    assert GRAINS_WARNING in [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (-1, ValueError, r"`worker_buffer_size` must be greater than or equal to 0, got -1\."),
        (1.5, TypeError, r"`worker_buffer_size` must be an int, got 1.5"),
    ],
)
def test_worker_buffer_size_is_checked(value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        al.DataLoader(
            data_source=al.RangeDataSource(0, 4), sampler=al.SequentialSampler(4), worker_buffer_size=value
        )


def test_shard_options_must_be_shard_options() -> None:
    with pytest.raises(TypeError, match=r"`shard_options` must be a ShardOptions, got \(0, 2\)"):
        al.DataLoader(
            data_source=al.RangeDataSource(0, 4), sampler=al.SequentialSampler(4), shard_options=(0, 2)
        )


def strided_loader(workers: int, shard: al.ShardOptions | None, **sampler: Any) -> al.DataLoader:
    return al.DataLoader(
        data_source=al.RangeDataSource(0, 20),
        sampler=al.IndexSampler(20, num_epochs=2, **sampler),
        operations=[al.Batch(3)],
        worker_count=workers,
        shard_options=shard,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loaders_shard_options_choose_the_indices_it_reads(workers: int) -> None:
    # The sampler is unsharded: the loader's options pick global indices 1, 4, 7, ...
    got = [b.tolist() for b in strided_loader(workers, al.ShardOptions(1, 3))]
    keys = al.IndexSampler(20, num_epochs=2).record_keys(1, 40, 3)
    assert got == [keys[i : i + 3] for i in range(0, len(keys), 3)]


def test_without_shard_options_the_loader_takes_the_samplers() -> None:
    shard = al.ShardOptions(1, 3)
    ours = [b.tolist() for b in strided_loader(0, None, shard_options=shard)]
    assert ours == [b.tolist() for b in strided_loader(0, shard, shard_options=shard)]
    assert ours != [b.tolist() for b in strided_loader(0, None)]


def test_a_state_of_another_shard_is_refused() -> None:
    with iter(strided_loader(0, al.ShardOptions(1, 3))) as iterator:
        next(iterator)
        state = iterator.get_state()
    for other in (al.ShardOptions(2, 3), None):
        with pytest.raises(ValueError, match="sampler"):
            iter(strided_loader(0, other)).set_state(state)


@pytest.mark.parametrize(
    ("sampler_shard", "loader_shard"),
    [(None, (1, 3)), ((0, 2), (1, 2)), ((2, 3), (2, 3)), ((0, 2, True), None)],
    ids=["unsharded-sampler", "other-shard", "same", "sampler-only"],
)
def test_shard_options_give_grains_batches(sampler_shard: Any, loader_shard: Any) -> None:
    gp = grain_python()

    def options(module: Any, shard: Any) -> Any:
        return module.NoSharding() if shard is None else module.ShardOptions(*shard)

    def batches(module: Any, source: Any) -> list[Any]:
        loader = module.DataLoader(
            data_source=source,
            sampler=module.IndexSampler(23, options(module, sampler_shard), True, 2, 5),
            operations=[module.Batch(4)],
            shard_options=None if loader_shard is None else options(module, loader_shard),
            worker_buffer_size=2,
        )
        return list(loader)

    wanted = batches(gp, list(range(23)))
    assert wanted
    assert_same_outputs(batches(al, al.RangeDataSource(0, 23)), wanted)


def test_worker_count_none_is_one_worker_per_cpu_as_in_grain() -> None:
    loader = al.DataLoader(
        data_source=al.RangeDataSource(0, 9), sampler=al.SequentialSampler(9), worker_count=None
    )
    assert loader.worker_count == (os.cpu_count() or 1)
    assert list(loader) == list(range(9))
