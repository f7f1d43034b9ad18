"""The read and the leading maps, record by record (`_operations/fused`): the results of applying
them one after the other, the stage that raised, the probe's timings, and a close between records."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader._common.calls import NEVER, Shutdown, Stopped
from aioloader._operations.fused import (
    BLOCK_SECONDS,
    MAX_BLOCK,
    PROBE_RECORDS,
    FusedMaps,
    block_size,
    compile_loop,
)
from aioloader._operations.transforms import Kind, compile_operations
from aioloader._program import read_pool


class Add(aioloader.MapTransform):
    def __init__(self, n: int) -> None:
        self.n = n

    def map(self, x: int) -> int:
        return x + self.n


class Draw(aioloader.RandomMapTransform):
    def random_map(self, x: int, rng: np.random.Generator) -> tuple[int, int]:
        return x, int(rng.integers(1000))


def fused(*transforms: Any) -> FusedMaps:
    return FusedMaps(compile_operations(list(transforms)).before)


def rng_of(j: int) -> np.random.Generator:
    return np.random.default_rng(j)


def test_reads_and_maps_give_what_the_maps_give_one_after_the_other() -> None:
    maps = fused(Add(1), Draw(), lambda pair: pair[0] * 10 + pair[1])
    out: list[Any] = []
    stage, error, spent = maps.run(
        out, [5, 6, 7, 8], {5: 50, 6: 60, 7: 70, 8: 80}.__getitem__, [None, rng_of, None], NEVER
    )
    assert (stage, error) == (-1, None)
    draws = [int(rng_of(j).integers(1000)) for j in range(4)]
    assert out == [(x + 1) * 10 + d for x, d in zip([50, 60, 70, 80], draws, strict=True)]
    assert len(spent) == 4
    assert all(seconds >= 0 for seconds in spent)


# (a read or not, the stage that fails: 0 the read, i the i-th map)
FAILURES = [(True, 0), (True, 1), (True, 2), (True, 3), (False, 1), (False, 2), (False, 3)]


@pytest.mark.parametrize(("reads", "failing"), FAILURES, ids=[f"read{r:d}-stage{f}" for r, f in FAILURES])
# In the timed probe, after it, and in later blocks (the first record of one, and within one).
@pytest.mark.parametrize("at", [0, 1, PROBE_RECORDS, 7, PROBE_RECORDS + MAX_BLOCK, 150])
def test_the_stage_that_raised_and_the_results_before_it(reads: bool, failing: int, at: int) -> None:
    """Stage 0 is the read (with one), then each map; the results before the record stay."""

    def get(key: int) -> int:
        if failing == 0 and key == at:
            raise KeyError(key)
        return key

    def breaker(i: int) -> Any:
        def call(x: int) -> int:
            if i == failing and x == at:
                raise ValueError(f"stage {i}")
            return x

        return call

    maps = fused(*(breaker(i) for i in (1, 2, 3)))
    out: list[Any] = []
    stage, error, _ = maps.run(out, list(range(200)), get if reads else None, [None] * 3, NEVER)
    assert out == list(range(at))
    assert stage == (failing if reads else failing - 1)
    assert isinstance(error, KeyError if failing == 0 else ValueError)


def test_a_stop_iteration_is_returned_as_an_error_not_an_end() -> None:
    def stray(x: int) -> int:
        if x == 3:
            raise StopIteration  # a stray next() on an exhausted iterator
        return x

    out: list[Any] = []
    stage, error, _ = fused(stray).run(out, list(range(6)), None, [None], NEVER)
    assert (stage, type(error), out) == (0, StopIteration, [0, 1, 2])


def closing_at(shutdown: Shutdown, at: int, seen: list[int]) -> Any:
    """A map that notes each input and sets `shutdown` at input `at`."""

    def watch(x: int) -> int:
        seen.append(x)
        if x == at:
            shutdown.set()
        return x

    return watch


def ticking(step: float) -> Any:
    """A clock that advances `step` seconds at each read: every timed stage takes `step`."""
    now = itertools.count()
    return lambda: next(now) * step


def test_a_close_stops_between_two_slow_records() -> None:
    shutdown, seen = Shutdown(), []
    maps = fused(closing_at(shutdown, 4, seen))
    with pytest.raises(Stopped):  # records as slow as a block: the flag is read before each
        maps.run([], list(range(10)), None, [None], shutdown, clock=ticking(BLOCK_SECONDS))
    assert seen == [0, 1, 2, 3, 4]


def test_a_close_stops_fast_records_at_the_end_of_their_block() -> None:
    shutdown, seen = Shutdown(), []
    maps = fused(closing_at(shutdown, 4, seen))
    with pytest.raises(Stopped):  # records that take no time: the flag is read every MAX_BLOCK
        maps.run([], list(range(1000)), None, [None], shutdown, clock=ticking(0.0))
    assert seen == list(range(PROBE_RECORDS + MAX_BLOCK))


def test_a_close_before_the_first_record_reads_none() -> None:
    shutdown, seen = Shutdown(), []
    shutdown.set()
    with pytest.raises(Stopped):
        fused(closing_at(shutdown, -1, seen)).run([], list(range(10)), None, [None], shutdown)
    assert seen == []


@pytest.mark.parametrize(
    ("seconds", "block"),
    [(0.0, MAX_BLOCK), (1e-9, MAX_BLOCK), (BLOCK_SECONDS / 10, 10), (BLOCK_SECONDS, 1), (1.0, 1)],
)
def test_a_block_holds_the_records_of_block_seconds(seconds: float, block: int) -> None:
    assert block_size(seconds) == block


def test_every_record_is_run_once_whatever_the_block() -> None:
    for step in (0.0, BLOCK_SECONDS / 7, BLOCK_SECONDS):
        out: list[int] = []
        stage, error, _ = fused(Add(1)).run(out, list(range(1000)), None, [None], NEVER, clock=ticking(step))
        assert (stage, error, out) == (-1, None, list(range(1, 1001)))


def test_a_flag_for_a_thread_is_set_with_its_owner_even_when_made_after() -> None:
    owner = Shutdown()
    early = owner.for_thread()
    owner.set()
    late = owner.for_thread()
    assert early.closing
    assert late.closing


@pytest.mark.parametrize("kinds", list(itertools.product([Kind.MAP, Kind.RANDOM_MAP], repeat=3)))
def test_every_sequence_of_kinds_compiles_and_names_its_stages(kinds: tuple[Kind, ...]) -> None:
    loop = compile_loop(kinds, True, False)
    assert loop.__code__.co_filename == "<aioloader: read and 3 maps>"


def test_records_go_through_one_at_a_time() -> None:
    """Depth first: a record is read and mapped before the next is read (one in flight),
    once the first `PROBE_READS` reads were timed one by one to learn whether reads wait
    (`read_pool`: a slow source is read on `ReadOptions.num_threads` threads); the chunk
    that holds them is read first, then mapped."""
    calls: list[str] = []

    class Source:
        def __len__(self) -> int:
            return 64

        def __getitem__(self, key: int) -> int:
            calls.append(f"read {key}")
            return key

    def double(x: int) -> int:
        calls.append(f"map {x}")
        return 2 * x

    loader = aioloader.DataLoader(
        data_source=Source(), sampler=aioloader.SequentialSampler(64), operations=[double, aioloader.Batch(4)]
    )
    assert [x for batch in loader for x in batch.tolist()] == [2 * k for k in range(64)]
    probed = read_pool.PROBE_READS  # the first chunk: one batch, of as many records here
    assert calls[: 2 * probed] == [f"read {k}" for k in range(probed)] + [f"map {k}" for k in range(probed)]
    assert calls[2 * probed :] == [f"{what} {k}" for k in range(probed, 64) for what in ("read", "map")]
