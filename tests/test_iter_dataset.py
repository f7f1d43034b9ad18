"""`IterDataset` on every build: one output for every worker count, exact resume after every
k-th output with any worker count, `for` and `async for` alike, states small JSON, errors in
order, bounded memory, threads stopped, bad arguments refused by name.

The elements themselves are checked against Grain 0.2.18 in test_iter_dataset_grain.py
(3.11); here every pipeline is compared with itself run inline (`prefetch(0)`).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader._executors.interpreter.subinterpreters import unavailable
from tests.conftest import aioloader_threads, repeated
from tests.support.datasets import BadArgument, refused_by_name
from tests.support.outputs import drain, notes
from tests.support.thread_starts import note_thread_starts
from tests.support.tracked import Ledger, TrackedSource
from tests.support.transforms import is_long, shout

Build = Callable[[int], al.IterDataset[Any]]  # worker count -> pipeline


def tokens(seed: int, count: int, longest: int = 10) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"t": rng.integers(1, 500, rng.integers(1, longest + 1)).astype(np.int32)} for _ in range(count)]


def odd(x: Any) -> bool:
    return int(np.sum(x)) % 2 == 1


def draw(x: Any, rng: np.random.Generator) -> tuple[Any, int]:
    return x, int(rng.integers(1 << 30))


def corpus(seed: int, count: int) -> al.IterDataset[dict[str, np.ndarray]]:
    return al.MapDataset.source(tokens(seed, count)).shuffle(seed=seed).to_iter_dataset()


PIPELINES: dict[str, Build] = {
    "part": lambda w: al.MapDataset.range(97).to_iter_dataset().prefetch(w),
    "part: holes, maps, filter, batch, after": lambda w: (
        al.MapDataset.range(300)
        .filter(lambda x: x % 7 != 0)
        .to_iter_dataset()
        .map(lambda x: x * 3)
        .random_map(draw, seed=1)
        .filter(odd)
        .batch(4)
        .map(len)
        .prefetch(w)
    ),
    "second batch, in order": lambda w: (
        al.MapDataset.range(99).to_iter_dataset().batch(3).batch(2).prefetch(w)
    ),
    "mix by name, then in order": lambda w: (
        al.IterDataset.mix(
            {"a": corpus(1, 60), "b": corpus(2, 90).filter(lambda e: len(e["t"]) > 3)}, {"a": 1, "b": 3}
        )
        .map(lambda e: {"t": e["t"], "n": len(e["t"])})
        .random_map(lambda e, rng: {**e, "r": rng.integers(9)}, seed=4)
        .prefetch(w)
    ),
    "window shuffle": lambda w: al.WindowShuffleIterDataset(
        al.MapDataset.range(80).to_iter_dataset().batch(2), window_size=7, seed=3
    ).prefetch(w),
    "interleave": lambda w: al.InterleaveIterDataset(
        [al.MapDataset.range(s, s + 5 + s // 100).to_iter_dataset() for s in range(0, 900, 100)],
        cycle_length=3,
    ).prefetch(w),
    "first-fit packing": lambda w: al.FirstFitPackIterDataset(
        corpus(3, 120), length_struct={"t": 24}, num_packing_bins=3, seed=2
    ).prefetch(w),
    "best-fit packing, batched": lambda w: (
        al.BestFitPackIterDataset(corpus(4, 120), length_struct={"t": 16}, num_packing_bins=4)
        .batch(2)
        .prefetch(w)
    ),
    "concat-then-split": lambda w: al.ConcatThenSplitIterDataset(
        corpus(5, 70), length_struct={"t": 9}
    ).prefetch(w),
    "mix, pack, shuffle, batch": lambda w: (
        al.WindowShuffleIterDataset(
            al.FirstFitPackIterDataset(
                al.IterDataset.mix([corpus(6, 80), corpus(7, 80)], [0.7, 0.3]),
                length_struct={"t": 20},
                num_packing_bins=2,
            ),
            window_size=3,
            seed=1,
        )
        .batch(2, drop_remainder=True)
        .prefetch(w)
    ),
}


def canonical(output: Any) -> str:
    """An output as text, leaf by leaf (arrays as lists with their dtype)."""

    def plain(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): plain(v) for k, v in sorted(x.items())}
        if isinstance(x, (tuple, list)):
            return [plain(v) for v in x]
        if isinstance(x, (np.ndarray, np.generic)):
            return [str(x.dtype), np.asarray(x).tolist()]
        return x

    return json.dumps(plain(output))


def outputs(iterator: Iterator[Any]) -> list[str]:
    return [canonical(x) for x in iterator]


@pytest.fixture(scope="module")
def reference() -> dict[str, list[str]]:
    """Every pipeline's outputs, run inline."""
    return {name: outputs(iter(build(0))) for name, build in PIPELINES.items()}


@repeated
@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("name", PIPELINES)
def test_the_output_does_not_depend_on_the_worker_count(
    name: str, workers: int, repeat: int, reference: dict[str, list[str]]
) -> None:
    assert len(reference[name]) > 5
    assert outputs(iter(PIPELINES[name](workers))) == reference[name]


def states_after_each_output(build: Build, workers: int) -> list[dict[str, Any]]:
    with iter(build(workers)) as iterator:
        states = [iterator.get_state()]
        for _ in iterator:
            states.append(iterator.get_state())
    return states


@pytest.mark.parametrize("name", PIPELINES)
def test_resume_after_every_kth_output_with_any_worker_count(
    name: str, reference: dict[str, list[str]]
) -> None:
    build, expected = PIPELINES[name], reference[name]
    states = states_after_each_output(build, 2)
    assert len(states) == len(expected) + 1
    sizes = [len(json.dumps(state)) for state in states]
    assert max(sizes) < 4000, max(sizes)  # a few hundred bytes per part, whatever the data
    step = max(1, len(expected) // 25)
    for k in [*range(0, len(expected) + 1, step), len(expected)]:
        iterator = iter(build(k % 3))
        iterator.set_state(json.loads(json.dumps(states[k])))
        assert outputs(iterator) == expected[k:], f"resumed after output {k}"


@pytest.mark.parametrize("name", ["part: holes, maps, filter, batch, after", "mix, pack, shuffle, batch"])
def test_async_for_gives_the_same_outputs_and_states(name: str, reference: dict[str, list[str]]) -> None:
    async def run() -> tuple[list[str], list[dict[str, Any]]]:
        got, states = [], []
        async with aiter(PIPELINES[name](2)) as iterator:
            async for item in iterator:
                got.append(canonical(item))
                states.append(iterator.get_state())
        return got, states

    got, states = asyncio.run(run())
    assert got == reference[name]
    assert states == states_after_each_output(PIPELINES[name], 0)[1:]


@pytest.mark.asyncio
async def test_async_resume_from_a_sync_state(reference: dict[str, list[str]]) -> None:
    name = "mix, pack, shuffle, batch"
    states = states_after_each_output(PIPELINES[name], 1)
    iterator = aiter(PIPELINES[name](2))
    iterator.set_state(states[4])
    assert [canonical(x) async for x in iterator] == reference[name][4:]


class Slow:
    """A map that waits (as a read or a heavy transform would)."""

    def __call__(self, x: int) -> int:
        time.sleep(0.002)
        return x


@pytest.mark.asyncio
async def test_the_event_loop_stays_free_while_the_stages_run() -> None:
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    beat = asyncio.create_task(heartbeat())
    mixed = al.IterDataset.mix([al.MapDataset.range(40).to_iter_dataset().map(Slow())] * 2)
    got = [x async for x in mixed.batch(4).prefetch(1)]
    beat.cancel()
    assert len(got) == 20
    assert ticks > 20  # the loop ran between outputs: nothing blocked it


def test_a_mix_by_name_resumes_with_new_weights_and_new_components() -> None:
    def source(base: int) -> al.IterDataset[int]:
        return al.MapDataset.range(base, base + 1000).to_iter_dataset()

    first = al.IterDataset.mix({"code": source(0), "web": source(10_000)}, {"code": 1, "web": 3})
    with iter(first.prefetch(2)) as iterator:
        before = [next(iterator) for _ in range(101)]
        state = iterator.get_state()
    # New weights, a new component, and `code` dropped: `web` goes on where it was.
    second = al.IterDataset.mix({"web": source(10_000), "books": source(50_000)}, {"web": 1, "books": 1})
    resumed = iter(second.prefetch(1))
    resumed.set_state(state)
    after = [next(resumed) for _ in range(200)]
    resumed.close()
    web_before = [x for x in before if 10_000 <= x < 50_000]
    web_after = [x for x in after if 10_000 <= x < 50_000]
    assert web_before + web_after == list(range(10_000, 10_000 + len(web_before) + len(web_after)))
    assert [x for x in after if x >= 50_000] == list(range(50_000, 50_000 + 100))  # from its start
    assert len(web_after) == 100  # the new weights select from here on


def test_a_mix_by_list_refuses_a_state_with_another_number_of_datasets() -> None:
    two = al.IterDataset.mix([al.MapDataset.range(5).to_iter_dataset()] * 2)
    three = al.IterDataset.mix([al.MapDataset.range(5).to_iter_dataset()] * 3)
    iterator = iter(two)
    next(iterator)
    with pytest.raises(ValueError, match="states of 2 mixed datasets, but this mix has 3"):
        iter(three).set_state(iterator.get_state())
    iterator.close()


class HostileMap:
    """Raises `kind` on element 5, and returns a dict (the wrong type) for element 3 if asked."""

    def __init__(self, kind: type[BaseException] | None, wrong_type: bool = False) -> None:
        self.kind, self.wrong_type = kind, wrong_type

    def __call__(self, x: int) -> Any:
        if x == 5 and self.kind is not None:
            raise self.kind("hostile")
        return {"three": x} if x == 3 and self.wrong_type else np.full(2, x)


def first_error(iterator: Iterator[Any]) -> tuple[list[Any], BaseException]:
    return drain(iterator, BaseException)


HOSTILE = [(StopIteration, RuntimeError), (KeyError, KeyError)]


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit], ids=lambda k: k.__name__)
@pytest.mark.parametrize("after_mix", [False, True], ids=["in a part", "after a mix"])
def test_interrupts_in_a_map_stop_the_iterator_at_once(kind: type[BaseException], after_mix: bool) -> None:
    # Not the data's errors (as in the DataLoader): they reach the consumer as they
    # are, and nothing after them is delivered.
    ds = al.MapDataset.range(20).to_iter_dataset()
    if after_mix:
        ds = al.IterDataset.mix([ds])
    got, error = first_error(iter(ds.map(HostileMap(kind)).prefetch(2)))
    assert [int(x[0]) for x in got] == list(range(len(got)))
    assert len(got) <= 5
    assert type(error) is kind


@pytest.mark.parametrize(("kind", "raised"), HOSTILE, ids=lambda k: getattr(k, "__name__", ""))
@pytest.mark.parametrize("workers", [0, 2])
def test_hostile_maps_in_a_part_fail_in_order(kind: type[BaseException], raised: type, workers: int) -> None:
    ds = al.MapDataset.range(20).to_iter_dataset().map(HostileMap(kind)).prefetch(workers)
    got, error = first_error(iter(ds))
    assert [int(x[0]) for x in got] == [0, 1, 2, 3, 4]
    assert type(error) is raised
    assert "IterDataset.map (HostileMap)" in notes(error)


@pytest.mark.parametrize(("kind", "raised"), HOSTILE, ids=lambda k: getattr(k, "__name__", ""))
@pytest.mark.parametrize("asynchronous", [False, True], ids=["for", "async for"])
def test_hostile_maps_after_a_mix_fail_in_order(
    kind: type[BaseException], raised: type, asynchronous: bool
) -> None:
    part = al.MapDataset.range(20).to_iter_dataset()
    ds = al.IterDataset.mix([part], [1]).map(HostileMap(kind)).prefetch(2)
    if asynchronous:

        async def run() -> tuple[list[Any], BaseException]:
            got: list[Any] = []
            try:
                async for item in ds:
                    got.append(item)
            except BaseException as error:
                return got, error
            raise AssertionError("no error")

        got, error = asyncio.run(run())
    else:
        got, error = first_error(iter(ds))
    assert [int(x[0]) for x in got] == [0, 1, 2, 3, 4]
    assert type(error) is raised
    assert "IterDataset.map (HostileMap)" in notes(error)


@pytest.mark.parametrize("in_order", [False, True], ids=["in a part", "after a mix"])
def test_a_map_returning_the_wrong_type_fails_the_batch_in_order(in_order: bool) -> None:
    ds = al.MapDataset.range(20).to_iter_dataset()
    if in_order:
        ds = al.IterDataset.mix([ds])
    got, error = first_error(iter(ds.map(HostileMap(None, wrong_type=True)).batch(2).prefetch(2)))
    assert [x.tolist() for x in got] == [[[0, 0], [1, 1]]]
    assert "cannot batch" in str(error)


def test_a_transform_error_after_outputs_closes_the_iterator() -> None:
    iterator = iter(al.IterDataset.mix([al.MapDataset.range(9).to_iter_dataset()]).map(HostileMap(KeyError)))
    got, _ = first_error(iterator)
    assert len(got) == 5
    with pytest.raises(StopIteration):
        next(iterator)
    iterator.set_state(iterator.get_state())  # reopens, after the last output delivered
    with pytest.raises(KeyError):
        next(iterator)


def peak_held(dataset: al.IterDataset[Any], outputs: int) -> int:
    """Consume `outputs` slowly; the most records the pipeline held at once."""
    Ledger.start()
    iterator = iter(dataset)
    for _ in range(outputs):
        time.sleep(0.0005)
        item = next(iterator)
        Ledger.change(held=-(len(item) if isinstance(item, list) else 1))
    iterator.close()
    del item, iterator
    deadline = time.monotonic() + 2.0
    while gc.collect() is not None and Ledger.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Ledger.alive == 0
    return Ledger.peak


@repeated
@pytest.mark.parametrize("workers", [0, 2])
def test_a_slow_consumer_keeps_what_is_in_flight_bounded(workers: int, repeat: int) -> None:
    def part(window: int) -> al.IterDataset[Any]:
        options = al.ReadOptions(prefetch_buffer_size=window)
        return al.MapDataset.source(TrackedSource()).to_iter_dataset(options)

    assert peak_held(part(40).prefetch(workers), 300) <= 40
    # Two parts mixed, each within its window; a batch in order adds one batch; the
    # thread that runs stages in order (async for, device_put) a few outputs more.
    mixed = al.IterDataset.mix([part(30), part(50)]).batch(4, batch_fn=list).prefetch(workers)
    assert peak_held(mixed, 100) <= 30 + 50 + 4


def test_close_from_another_thread_stops_every_thread() -> None:
    ds = al.IterDataset.mix([al.MapDataset.range(10**6).to_iter_dataset().map(Slow())] * 2).prefetch(2)
    iterator = iter(ds)
    next(iterator)
    closer = threading.Thread(target=iterator.close)
    closer.start()
    closer.join()
    assert list(iterator) == []  # closed: nothing more, no hang


def test_dropping_an_iterator_stops_its_threads() -> None:
    ds = al.IterDataset.mix([al.MapDataset.range(10**6).to_iter_dataset()] * 2).prefetch(2)
    iterator = iter(ds)
    next(iterator)
    assert aioloader_threads()
    del iterator
    gc.collect()  # the conftest fixture checks that none is left


@pytest.mark.asyncio
async def test_dropping_an_async_iterator_in_the_background_stops_its_threads() -> None:
    iterator = aiter(al.IterDataset.mix([al.MapDataset.range(10**6).to_iter_dataset()]).prefetch(2))
    await anext(iterator)
    await iterator.aclose()
    await iterator.aclose()  # idempotent
    assert [x async for x in iterator] == []


class Countdown(al.IterDataset[int]):
    """A user's IterDataset, as Grain's are written: `__iter__` with a resumable iterator."""

    def __init__(self, start: int) -> None:
        super().__init__()
        self.start = start

    def __iter__(self) -> Any:
        return CountdownIterator(self.start)


class CountdownIterator:
    def __init__(self, value: int) -> None:
        self.value = value

    def __next__(self) -> int:
        if self.value <= 0:
            raise StopIteration
        self.value -= 1
        return self.value + 1

    def get_state(self) -> dict[str, int]:
        return {"value": self.value}

    def set_state(self, state: dict[str, int]) -> None:
        self.value = state["value"]


def test_a_users_iter_dataset_runs_in_order_with_its_own_state() -> None:
    ds = al.IterDataset.mix([Countdown(6), al.MapDataset.range(100, 110).to_iter_dataset()]).map(str)
    assert list(ds) == ["6", "100", "5", "101", "4", "102", "3", "103", "2", "104", "1", "105"]
    iterator = iter(ds)
    for _ in range(5):
        next(iterator)
    resumed = iter(ds)
    resumed.set_state(iterator.get_state())
    assert list(resumed) == list(iterator) == ["102", "3", "103", "2", "104", "1", "105"]


def test_mp_prefetch_is_prefetch_on_threads() -> None:
    ds = al.MapDataset.range(50).to_iter_dataset().filter(odd).batch(3)
    expected = [x.tolist() for x in ds]
    assert [x.tolist() for x in ds.mp_prefetch()] == expected  # Grain's 10 workers
    assert [x.tolist() for x in ds.mp_prefetch(al.MultiprocessingOptions(num_workers=3))] == expected
    assert [x.tolist() for x in ds.prefetch(al.MultiprocessingOptions(num_workers=2))] == expected


def test_the_nearest_prefetch_sets_a_parts_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    inner = al.MapDataset.range(30).to_iter_dataset().map(shout_number).prefetch(1)
    outer = al.IterDataset.mix([inner, al.MapDataset.range(5).to_iter_dataset()]).prefetch(3)
    starts = note_thread_starts(monkeypatch)  # workers start one another, maybe after the last output
    with iter(outer) as iterator:
        assert list(iterator)
    workers = [started for _, started in starts if started.startswith("aioloader-worker")]
    assert len(workers) == 1 + 3, workers  # one for the inner part, three for the other


def shout_number(x: int) -> str:
    return shout(str(x))


def part() -> al.IterDataset[int]:
    return al.MapDataset.range(3).to_iter_dataset()


def packer(kind: Any, **options: Any) -> Callable[[], Any]:
    return lambda: kind(al.MapDataset.range(3), length_struct={"t": 4}, **options)


REPLACE = al.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS
BAD_ARGUMENTS: list[BadArgument] = [
    (lambda: al.MapDataset.range(3).to_iter_dataset(read_options=4), TypeError, "`read_options`"),
    (lambda: al.MapDataset.range(3).to_iter_dataset(allow_nones="yes"), TypeError, "`allow_nones`"),
    (lambda: part().batch(0), ValueError, "`batch_size` must be greater"),
    (lambda: part().batch(2, drop_remainder=1), TypeError, "`drop_remainder`"),
    (lambda: part().map(3), TypeError, "`transform` of `map`"),
    (lambda: part().random_map(draw), ValueError, "requires a seed"),
    (lambda: part().prefetch(-1), ValueError, "`worker_count` must be"),
    (lambda: part().prefetch(2, executor="process"), ValueError, "`executor`"),
    (lambda: part().mp_prefetch(worker_init_fn=print), ValueError, "threads"),
    (lambda: al.MultiprocessingOptions(num_workers=-2), ValueError, "`num_workers`"),
    (lambda: al.IterDataset.mix([]), ValueError, "`datasets` must hold at least one"),
    (lambda: al.IterDataset.mix("ab"), TypeError, "`datasets` must be a list or a dict"),
    (lambda: al.IterDataset.mix([part(), 4]), TypeError, r"`datasets\[1\]`"),
    (lambda: al.IterDataset.mix([part()], [1, 2]), ValueError, "one weight per"),
    (lambda: al.IterDataset.mix([part()], [-1]), ValueError, "greater than 0"),
    (lambda: al.IterDataset.mix({"a": part()}, {"b": 1}), ValueError, "with the names"),
    (lambda: al.IterDataset.mix([part()], {"a": 1}), TypeError, "only when `datasets` is a dict"),
    (lambda: al.WindowShuffleIterDataset(part(), window_size=0, seed=1), ValueError, "`window_size`"),
    (lambda: al.WindowShuffleIterDataset(part(), window_size=2, seed=-1), ValueError, "`seed`"),
    (lambda: al.WindowShuffleIterDataset([1], window_size=2, seed=1), TypeError, "`parent` must be"),
    (lambda: al.InterleaveIterDataset([part()], cycle_length=0), ValueError, "`cycle_length`"),
    (lambda: al.InterleaveIterDataset(5, cycle_length=2), TypeError, "`datasets` must be a sequence"),
    (packer(al.FirstFitPackIterDataset, num_packing_bins=0), ValueError, "`num_packing_bins`"),
    (
        lambda: al.FirstFitPackIterDataset(part(), length_struct={"t": 0}, num_packing_bins=2),
        ValueError,
        r"`length_struct\['t'\]`",
    ),
    (
        packer(al.BestFitPackIterDataset, num_packing_bins=2, shuffle_bins_group_by_feature="x"),
        ValueError,
        "`shuffle_bins_group_by_feature`",
    ),
    (packer(al.ConcatThenSplitIterDataset, bos_handling=REPLACE), ValueError, "`bos_token_id` must be set"),
    (packer(al.ConcatThenSplitIterDataset, bos_token_id=1), ValueError, "DO_NOTHING"),
    (lambda: part().device_put(3), TypeError, "`device_put` must be"),
    (lambda: part().device_put().map(str), ValueError, "`device_put` must be the last"),
]


test_bad_arguments_are_refused_by_name = refused_by_name(BAD_ARGUMENTS)


STATES: list[tuple[Any, str]] = [
    ("not json", "not JSON"),
    ({"version": 9, "dataset": {}}, "made by an IterDataset iterator"),
    ({"version": 1, "dataset": {"stage": "window_shuffle"}}, "the state of a mix stage"),
    (
        {"version": 1, "dataset": {"stage": "mix", "parents": [], "index": 0, "stop": False}},
        "states of 0 mixed",
    ),
]


@pytest.mark.parametrize(("state", "message"), STATES, ids=[m for _, m in STATES])
def test_states_from_elsewhere_are_refused(state: Any, message: str) -> None:
    ds = al.IterDataset.mix([al.MapDataset.range(9).to_iter_dataset()] * 2)
    with pytest.raises(ValueError, match=message):
        iter(ds).set_state(state)


def test_a_state_of_another_part_names_what_differs() -> None:
    state = iter(al.MapDataset.range(9).to_iter_dataset()).get_state()
    with pytest.raises(ValueError, match="another sampler"):  # its length differs
        iter(al.MapDataset.range(10).to_iter_dataset()).set_state(state)
    with pytest.raises(ValueError, match="another operations"):
        iter(al.MapDataset.range(9).to_iter_dataset().map(str).filter(odd)).set_state(state)


def test_a_refused_state_leaves_the_iterator_where_it_was() -> None:
    iterator = iter(al.IterDataset.mix([al.MapDataset.range(9).to_iter_dataset()]))
    assert [next(iterator), next(iterator)] == [0, 1]
    with pytest.raises(ValueError, match="must be the state of a mix stage"):
        iterator.set_state({"version": 1, "dataset": {"stage": "pack"}})
    assert list(iterator) == list(range(2, 9))


def test_device_put_puts_the_outputs_on_the_device() -> None:
    jax = pytest.importorskip("jax")

    def assert_on_device_and_equal(got: Any, expected: Any) -> None:
        leaves, expected_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)
        assert all(isinstance(leaf, jax.Array) for leaf in leaves)
        assert len(leaves) == len(expected_leaves)
        for leaf, value in zip(leaves, expected_leaves, strict=True):
            np.testing.assert_array_equal(np.asarray(leaf), value)

    for name in ("part", "mix, pack, shuffle, batch"):  # the engine's device thread; the stages' thread
        plain = list(PIPELINES[name](2))
        on_device = PIPELINES[name](2).device_put(al.DevicePut(buffer_size=2))
        with iter(on_device) as iterator:
            for expected, got in zip(plain, iterator, strict=True):
                assert_on_device_and_equal(got, expected)
        with iter(on_device) as resumed:
            resumed.set_state(states_after_each_output(PIPELINES[name], 0)[2])
            assert_on_device_and_equal(next(resumed), plain[2])


@pytest.mark.subinterpreters
@pytest.mark.skipif(unavailable() is not None, reason=f"{unavailable()}")
def test_the_interpreter_executor_gives_the_same_outputs() -> None:
    def pipeline(executor: str) -> al.IterDataset[Any]:
        words = al.MapDataset.source([f"w{i}" * (i % 4) for i in range(300)]).filter(bool)
        part = words.to_iter_dataset().map(shout).filter(is_long).batch(5, batch_fn=list)
        return al.IterDataset.mix([part, part]).prefetch(2, executor=executor)

    assert list(pipeline("interpreter")) == list(pipeline("thread"))


def test_a_filter_that_drops_nearly_everything_is_warned_about_as_in_grain(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="aioloader"):
        rare = al.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 1000 == 7)
        assert list(rare) == [7, 1007, 2007]
        assert len(list(al.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 2 == 0))) == 1500
        # Each filter's own window: 700 and 300 elements of two loaders are not one window.
        assert len(list(al.MapDataset.range(700).to_iter_dataset().filter(lambda x: x % 20 == 0))) == 35
        assert len(list(al.MapDataset.range(300).to_iter_dataset().filter(lambda x: x % 20 == 0))) == 15
    warnings = [r.getMessage() for r in caplog.records if r.name == "aioloader"]
    assert len(warnings) == 1, warnings  # once a minute per filter; none for the half kept
    assert re.match(
        r"Transformation FilterDatasetIterator\(transform=.*<lambda>\) skipped 99\.\d+ % of the last "
        r"seen \d+ elements\. Please check the filtering logic\.",
        warnings[0],
    )
