"""Hostile inputs, as an outside reviewer throws them at the loader: user code that raises
what it should not or returns the wrong thing, sources and samplers that lie, states from
other pipelines or from nowhere, closes from every side, and bad arguments.

Each attack here is one the loader withstands, as its contracts say (shared/DESIGN.md):
errors in output order with their type and the record's index and key (4), the same
output for every worker count and after every resume (1, 2), every thread joined (5,
checked after every test by the `no_leftover_threads` fixture), bad input refused at once
naming the parameter (7). Most run over `worker_count` 0, 2 and "auto", with `for` and
`async for`, with and without a `Batch`.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import inspect
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pytest

from aioloader import (
    Batch,
    DataLoader,
    DevicePut,
    FilterTransform,
    FlatMapTransform,
    IndexSampler,
    MapTransform,
    NoSharding,
    RandomMapTransform,
    RangeDataSource,
    ReadOptions,
    RecordMetadata,
    SequentialSampler,
    ShardOptions,
)
from tests.conftest import repeated
from tests.support.outputs import notes
from tests.support.reference import canonical, reference_outputs
from tests.support.transforms import LenIs

Workers = int | str

# Every way to iterate: worker_count 0, 2 and "auto", each with `for` and `async for`.
MODES = [
    pytest.param(workers, is_async, id=f"{workers}-{'async' if is_async else 'sync'}")
    for workers in (0, 2, "auto")
    for is_async in (False, True)
]
BATCHED = [pytest.param(False, id="unbatched"), pytest.param(True, id="batched")]


def collect(
    loader: DataLoader, is_async: bool, limit: int | None = None
) -> tuple[list[Any], BaseException | None]:
    """The outputs of `for` (or `async for`) over `loader`, and what ended it (None: its end)."""
    got: list[Any] = []

    def full() -> bool:
        return limit is not None and len(got) >= limit

    try:
        if is_async:

            async def take() -> None:
                async for item in loader:
                    got.append(item)
                    if full():
                        break

            asyncio.run(take())
        else:
            for item in loader:
                got.append(item)
                if full():
                    break
    except BaseException as error:  # the attacks raise KeyboardInterrupt and friends on purpose
        return got, error
    return got, None


def make(
    operations: list[Any],
    workers: Workers = 0,
    source: Any = None,
    n: int = 20,
    **sampler: Any,
) -> DataLoader:
    options: dict[str, Any] = {"num_epochs": 1, "seed": 1, **sampler}
    return DataLoader(
        data_source=RangeDataSource(0, n) if source is None else source,
        sampler=IndexSampler(n, **options),
        operations=operations,
        worker_count=workers,
    )


def plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else value


# 1. User code that raises what it should not.


class StrRaises(Exception):
    """An exception that cannot even be printed."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


class NotAnException(BaseException):
    """A BaseException of the user's own: not a data error."""


def raising(kind: str, error: Callable[[], BaseException], at: int = 6) -> list[Any]:
    """Operations whose `kind` step raises `error()` on the record of value `at`."""

    class Map(MapTransform):
        def map(self, element: Any) -> Any:
            if element == at:
                raise error()
            return element

    class RandomMap(RandomMapTransform):
        def random_map(self, element: Any, rng: np.random.Generator) -> Any:
            if element == at:
                raise error()
            return element

    class Filter(FilterTransform):
        def filter(self, element: Any) -> bool:
            if element == at:
                raise error()
            return True

    class FlatMap(FlatMapTransform):
        def flat_map(self, element: Any) -> Iterable[Any]:
            if element == at:
                raise error()
            return [element]

    class HalfwayFlatMap(FlatMapTransform):
        def flat_map(self, element: Any) -> Iterator[Any]:
            yield element  # delivered only if the record gives all of its elements
            if element == at:
                raise error()

    def batch_fn(elements: list[Any]) -> Any:
        if at in elements:
            raise error()
        return np.stack(elements)

    ops: dict[str, Callable[[], list[Any]]] = {
        "map": lambda: [Map()],
        "random_map": lambda: [RandomMap()],
        "filter": lambda: [Filter()],
        "flat_map": lambda: [FlatMap()],
        "flat_map-halfway": lambda: [HalfwayFlatMap()],
        "batch_fn": lambda: [Batch(2, batch_fn=batch_fn)],
    }
    return ops[kind]()


PER_RECORD = ["map", "random_map", "filter", "flat_map", "flat_map-halfway"]
STEPS = [
    pytest.param(kind, batched, id=f"{kind}-{'batched' if batched else 'unbatched'}")
    for kind in PER_RECORD
    for batched in (False, True)
] + [pytest.param("batch_fn", True, id="batch_fn")]


def pipeline(kind: str, batched: bool, error: Callable[[], BaseException]) -> list[Any]:
    operations = raising(kind, error)
    return [*operations, Batch(2)] if batched and kind != "batch_fn" else operations


@pytest.mark.parametrize("stop", [StopIteration, StopAsyncIteration], ids=lambda k: k.__name__)
@pytest.mark.parametrize(("kind", "batched"), STEPS)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_a_stray_stop_is_an_error_in_its_place_never_the_end(
    kind: str, batched: bool, stop: type[Exception], workers: Workers, is_async: bool
) -> None:
    got, error = collect(make(pipeline(kind, batched, stop), workers), is_async)
    assert [plain(x) for x in got] == ([[0, 1], [2, 3], [4, 5]] if batched else list(range(6)))
    assert type(error) is RuntimeError
    assert isinstance(error.__cause__, stop)
    assert ("index=6..7" if kind == "batch_fn" else "index=6, record_key=6") in notes(error)


@pytest.mark.parametrize(("kind", "batched"), STEPS)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_an_exception_whose_str_raises_arrives_in_its_place(
    kind: str, batched: bool, workers: Workers, is_async: bool
) -> None:
    got, error = collect(make(pipeline(kind, batched, StrRaises), workers), is_async)
    assert len(got) == (3 if batched else 6)
    assert type(error) is StrRaises
    assert "failed on the" in notes(error)


BASE_EXCEPTIONS: list[Callable[[], BaseException]] = [
    lambda: KeyboardInterrupt("stop now"),
    lambda: SystemExit(3),
    GeneratorExit,
    lambda: NotAnException("mine"),
]


@pytest.mark.parametrize(
    "error", BASE_EXCEPTIONS, ids=["KeyboardInterrupt", "SystemExit", "GeneratorExit", "own"]
)
@pytest.mark.parametrize(("kind", "batched"), STEPS)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_a_base_exception_from_user_code_stops_the_loader_as_it_is(
    error: Callable[[], BaseException], kind: str, batched: bool, workers: Workers, is_async: bool
) -> None:
    loader = make(pipeline(kind, batched, error), workers)
    got, caught = collect(loader, is_async)
    assert type(caught) is type(error())
    expected = [[0, 1], [2, 3], [4, 5]] if batched else list(range(6))
    assert [plain(x) for x in got] == expected[: len(got)]  # stopped at once: fewer, never others


# 1. User code that returns the wrong thing.


def nothing(element: Any) -> Any:
    return None


def a_generator(element: Any) -> Any:
    return (element + k for k in range(2))


def an_object_array(element: Any) -> Any:
    return np.array([element, "text", None], dtype=object)


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_wrong_return_types_are_data_as_they_are(batched: bool, workers: Workers, is_async: bool) -> None:
    checks: list[tuple[Callable[[Any], Any], Callable[[Any], bool]]] = [
        (nothing, lambda x: x is None),
        (a_generator, inspect.isgenerator),
        (an_object_array, lambda x: bool(x.dtype == object and x[1] == "text")),
    ]
    for function, check in checks:
        operations: list[Any] = [function, Batch(2)] if batched else [function]
        got, error = collect(make(operations, workers, n=6), is_async)
        assert error is None
        if batched and function is nothing:  # None is an empty subtree, as in JAX and Grain
            assert got == [None, None, None]
        elif batched:
            assert len(got) == 3
            assert all(b.dtype == object and len(b) == 2 for b in got)
            assert all(check(x) for b in got for x in b)
        else:
            assert len(got) == 6
            assert all(check(x) for x in got)


class Structured(MapTransform):
    """Dicts of one structure, but record 5's is `odd`."""

    def __init__(self, odd: Any) -> None:
        self.odd = odd

    def map(self, element: Any) -> Any:
        return self.odd if element == 5 else {"a": np.zeros(3) + element}


@pytest.mark.parametrize(
    ("odd", "message"),
    [
        ({"b": np.zeros(3)}, "is not a dict with keys"),
        ({"a": np.zeros(4)}, "has different shapes"),
        ([np.zeros(3)], "is not a dict with keys"),
        ({"a": np.zeros(3), "b": 1}, "is not a dict with keys"),
    ],
    ids=["other-key", "other-shape", "list-for-dict", "extra-key"],
)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_elements_of_another_structure_fail_on_their_batch(
    odd: Any, message: str, workers: Workers, is_async: bool
) -> None:
    got, error = collect(make([Structured(odd), Batch(2)], workers), is_async)
    assert [b["a"][:, 0].tolist() for b in got] == [[0, 1], [2, 3]]
    assert type(error) is ValueError
    assert message in str(error)
    assert "index=4..5" in notes(error)


class NotIterable(FlatMapTransform):
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def flat_map(self, element: Any) -> Any:
        return self.answer if element == 5 else [element]


@pytest.mark.parametrize("answer", [5, None, 2.5], ids=["int", "None", "float"])
@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_a_flat_map_answering_no_iterable_fails_on_its_record(
    answer: Any, batched: bool, workers: Workers, is_async: bool
) -> None:
    operations: list[Any] = [NotIterable(answer), Batch(2)] if batched else [NotIterable(answer)]
    got, error = collect(make(operations, workers), is_async)
    assert [plain(x) for x in got] == ([[0, 1], [2, 3]] if batched else list(range(5)))
    assert type(error) is TypeError
    assert "not iterable" in str(error)
    assert "(NotIterable.flat_map) failed on the record with index=5, record_key=5" in notes(error)


class Endless(FlatMapTransform):
    """A record's elements without end, handed over as a list cut short: the user's cap."""

    def flat_map(self, element: Any) -> Iterable[Any]:
        forever = (element * 1000 + k for k in range(10**18))
        return [next(forever) for _ in range(3)]


@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_leaving_early_while_flat_maps_fan_out_leaves_nothing_running(
    workers: Workers, is_async: bool
) -> None:
    got, error = collect(make([Endless(), Batch(2)], workers), is_async, limit=4)
    assert error is None
    assert [plain(b) for b in got] == [[0, 1], [2, 1000], [1001, 1002], [2000, 2001]]


# 2. Sources and samplers that lie.


class Lies:
    """A source of 10 records by its `__len__`; `__getitem__` fails as `fail(key)` says."""

    def __init__(self, fail: Callable[[int], BaseException | None]) -> None:
        self.fail = fail

    def __len__(self) -> int:
        return 10

    def __getitem__(self, key: int) -> int:
        error = self.fail(key)
        if error is not None:
            raise error
        return key


LIES: dict[str, tuple[Callable[[int], BaseException | None], int, type[BaseException]]] = {
    # name: (what fails, the first key that fails, the type that reaches the consumer)
    "len-larger-than-served": (lambda k: IndexError(k) if k >= 8 else None, 8, IndexError),
    "index-error-in-range": (lambda k: IndexError(k) if k == 4 else None, 4, IndexError),
    "key-error-in-range": (lambda k: KeyError(k) if k == 4 else None, 4, KeyError),
    "stop-iteration-in-range": (lambda k: StopIteration() if k == 4 else None, 4, RuntimeError),
}


@pytest.mark.parametrize("lie", list(LIES))
@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_a_source_that_fails_in_range_is_an_error_never_the_end(
    lie: str, batched: bool, workers: Workers, is_async: bool
) -> None:
    fail, first, kind = LIES[lie]
    operations: list[Any] = [Batch(2)] if batched else []
    got, error = collect(make(operations, workers, source=Lies(fail), n=10), is_async)
    wanted = list(range(first))
    assert [plain(x) for x in got] == (
        [wanted[i : i + 2] for i in range(0, first - 1, 2)] if batched else wanted
    )
    assert type(error) is kind
    assert f"reading from Lies failed on the record with index={first}, record_key={first}" in notes(error)


class Counted:
    """Counts the reads of each key; each read gives a new value (the count so far)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.reads: Counter[int] = Counter()
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> tuple[int, int]:
        with self.lock:
            self.reads[key] += 1
            return key, self.reads[key]


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_a_source_whose_values_change_is_read_once_per_record(
    batched: bool, workers: Workers, is_async: bool
) -> None:
    source = Counted(50)
    operations: list[Any] = [Batch(4)] if batched else []
    got, error = collect(make(operations, workers, source=source, n=50, shuffle=True), is_async)
    assert error is None
    assert source.reads == Counter(range(50))
    keys = [int(k) for b in got for k in b[0]] if batched else [k for k, _ in got]
    sampler = IndexSampler(50, num_epochs=1, seed=1, shuffle=True)
    assert keys == [sampler[i].record_key for i in range(50)]


class ShortSampler:
    """Says it has 12 records, and serves 10."""

    def __repr__(self) -> str:
        return "ShortSampler()"

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> RecordMetadata:
        if index >= 10:
            raise IndexError(index)
        return RecordMetadata(index=index, record_key=index, rng=None)


@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_a_sampler_longer_than_it_serves_fails_where_it_stops(workers: Workers, is_async: bool) -> None:
    loader = DataLoader(data_source=RangeDataSource(0, 12), sampler=ShortSampler(), worker_count=workers)
    got, error = collect(loader, is_async)
    assert got == list(range(10))
    assert type(error) is IndexError
    assert "sampler[10] failed" in notes(error)


class TextKeys:
    """Keys "0", "1", ... into a dict source."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> RecordMetadata:
        return RecordMetadata(index=index, record_key=str(index), rng=None)  # type: ignore[arg-type]


def test_a_text_key_is_quoted_in_the_note() -> None:
    """record_key=3 would name the int 3, another record of another sampler."""

    def fails_on_3(x: int) -> int:
        if x == 3:
            raise ValueError("bad")
        return x

    source = {str(k): k for k in range(6)}
    loader = DataLoader(data_source=source, sampler=TextKeys(), operations=[fails_on_3])
    got, error = collect(loader, False)
    assert got == [0, 1, 2]
    assert "index=3, record_key='3'" in notes(error)


# 3. States from other pipelines, or from nowhere.


class AddOne(MapTransform):
    def map(self, element: Any) -> Any:
        return element + 1


class KeepSome(FilterTransform):
    def filter(self, element: Any) -> bool:
        return bool(element % 3 != 0)


def state_pipeline(
    n: int = 30,
    seed: int = 3,
    shard: NoSharding | ShardOptions | None = None,
    operations: list[Any] | None = None,
    num_epochs: int = 1,
    shuffle: bool = True,
) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, n),
        sampler=IndexSampler(
            n, shuffle=shuffle, num_epochs=num_epochs, seed=seed, shard_options=shard or NoSharding()
        ),
        operations=[AddOne(), Batch(3)] if operations is None else operations,
    )


def state_after(loader: DataLoader, outputs: int) -> bytes:
    with iter(loader) as iterator:
        for _ in range(outputs):
            next(iterator)
        return iterator.get_state()


OTHER_PIPELINES: dict[str, tuple[Callable[[], DataLoader], str]] = {
    "seed": (lambda: state_pipeline(seed=4), "sampler"),
    "num-records": (lambda: state_pipeline(n=31), "sampler"),
    "num-epochs": (lambda: state_pipeline(num_epochs=2), "sampler"),
    "no-shuffle": (lambda: state_pipeline(shuffle=False), "sampler"),
    "shard": (lambda: state_pipeline(shard=ShardOptions(0, 2)), "sampler"),
    "batch-size": (lambda: state_pipeline(operations=[AddOne(), Batch(4)]), "operations"),
    "drop-remainder": (
        lambda: state_pipeline(operations=[AddOne(), Batch(3, drop_remainder=True)]),
        "operations",
    ),
    "extra-map": (lambda: state_pipeline(operations=[AddOne(), AddOne(), Batch(3)]), "operations"),
    "filter-for-map": (lambda: state_pipeline(operations=[KeepSome(), Batch(3)]), "operations"),
    "no-batch": (lambda: state_pipeline(operations=[AddOne()]), "operations"),
}


@pytest.mark.parametrize("other", list(OTHER_PIPELINES))
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_state_of_another_pipeline_is_refused_naming_what_differs(other: str, is_async: bool) -> None:
    state = state_after(state_pipeline(), 2)
    make_other, part = OTHER_PIPELINES[other]
    loader = make_other()
    iterator = aiter(loader) if is_async else iter(loader)
    with pytest.raises(ValueError, match=f"another {part}"):
        iterator.set_state(state)


def test_a_state_of_another_shard_is_refused() -> None:
    state = state_after(state_pipeline(shard=ShardOptions(0, 2)), 2)
    for other in (ShardOptions(1, 2), ShardOptions(0, 2, drop_remainder=True), ShardOptions(0, 3)):
        with pytest.raises(ValueError, match="another sampler"):
            iter(state_pipeline(shard=other)).set_state(state)


def spoiled(change: Callable[[dict[str, Any]], Any]) -> bytes:
    """A real state of `state_pipeline()`, with its `aioloader` part changed by `change`."""
    document = json.loads(state_after(state_pipeline(), 2))
    change(document["aioloader"])
    return json.dumps(document).encode()


def setting(*path_and_value: Any) -> Callable[[dict[str, Any]], Any]:
    *path, key, value = path_and_value

    def change(part: dict[str, Any]) -> None:
        place: Any = part
        for step in path:
            place = place[step]
        place[key] = value

    return change


GARBAGE: dict[str, tuple[Callable[[], Any], str]] = {
    "truncated": (lambda: state_after(state_pipeline(), 2)[:150], "not the JSON"),
    "empty": (lambda: b"", "not the JSON"),
    "not-utf8": (lambda: b"\x00\xff\xfe", "not the JSON"),
    "not-json": (lambda: b"hello", "not the JSON"),
    "json-list": (lambda: b"[1, 2]", "JSON bytes holding an object"),
    "json-null": (lambda: b"null", "JSON bytes holding an object"),
    "json-number": (lambda: b"7", "JSON bytes holding an object"),
    "json-string": (lambda: b'"state"', "JSON bytes holding an object"),
    "none": (lambda: None, "JSON bytes holding an object"),
    "int": (lambda: 5, "JSON bytes holding an object"),
    "list": (lambda: [1], "JSON bytes holding an object"),
    "too-many-digits": (
        lambda: b'{"aioloader": {"version": 2, "position": {"index": 1' + b"0" * 5000 + b"}}}",
        "not the JSON",
    ),
    "index-float": (lambda: spoiled(setting("position", "index", 1.5)), r"\['index'\]` must be an int >= 0"),
    "index-string": (lambda: spoiled(setting("position", "index", "3")), r"\['index'\]` must be an int >= 0"),
    "index-null": (lambda: spoiled(setting("position", "index", None)), r"\['index'\]` must be an int >= 0"),
    "index-bool": (lambda: spoiled(setting("position", "index", True)), r"\['index'\]` must be an int >= 0"),
    "index-huge": (lambda: spoiled(setting("position", "index", 10**30)), r"\['index'\]` must be between 0"),
    "position-list": (lambda: spoiled(setting("position", [6, 0, 0])), "no 'position'"),
    "position-missing": (lambda: spoiled(lambda part: part.pop("position")), "no 'position'"),
    "version-string": (lambda: spoiled(setting("version", "2")), "version 2"),
    "version-3": (lambda: spoiled(setting("version", 3)), "version 2"),
    "version-true": (lambda: spoiled(setting("version", True)), "version 2"),  # True == 1: it was version 1
    "version-float": (lambda: spoiled(setting("version", 2.0)), "version 2"),
    "pipeline-list": (lambda: spoiled(setting("pipeline", [])), "no 'pipeline'"),
    "operations-string": (lambda: spoiled(setting("pipeline", "operations", "map")), "another operations"),
    "leftovers-one": (lambda: spoiled(setting("leftovers", [0])), r"\['leftovers'\]` must be a list of two"),
    "leftovers-string": (
        lambda: spoiled(setting("leftovers", [6, 7, "x"])),
        r"\['leftovers'\]` must be a list",
    ),
    "leftovers-dict": (lambda: spoiled(setting("leftovers", {"a": 1})), r"\['leftovers'\]` must be a list"),
    "leftovers-ahead": (lambda: spoiled(setting("leftovers", [7, 8])), "say was delivered already"),
}


@pytest.mark.parametrize("garbage", list(GARBAGE))
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_state_from_nowhere_is_a_value_error_that_says_what_is_wrong(garbage: str, is_async: bool) -> None:
    make_state, message = GARBAGE[garbage]
    loader = state_pipeline()
    iterator = aiter(loader) if is_async else iter(loader)
    with pytest.raises(ValueError, match=message):
        iterator.set_state(make_state())


def test_the_aioloader_part_of_a_state_must_be_an_object() -> None:
    document = json.loads(state_after(state_pipeline(), 2))
    parts: list[Any] = [None, [], "x"]
    for part in parts:
        with pytest.raises(ValueError, match="must be a dict made by get_state"):
            iter(state_pipeline()).set_state(json.dumps({**document, "aioloader": part}).encode())


def grain_form(**fields: Any) -> bytes:
    """A state as Grain's own DataLoader saves it for `state_pipeline()`, with `fields` changed."""
    document = json.loads(state_after(state_pipeline(), 0))
    document.pop("aioloader")
    document.update(fields)
    return json.dumps(document, indent=4).encode()


GRAIN_FIELDS: dict[str, tuple[dict[str, Any], str]] = {
    "seen-string": ({"last_seen_indices": {"0": "5"}}, r"\['last_seen_indices'\]\['0'\]` must be an index"),
    "seen-float": ({"last_seen_indices": {"0": 5.0}}, r"\['last_seen_indices'\]\['0'\]` must be an index"),
    "seen-null": ({"last_seen_indices": {"0": None}}, r"\['last_seen_indices'\]\['0'\]` must be an index"),
    "seen-before-start": ({"last_seen_indices": {"0": -2}}, "is not an index Grain's worker 0"),
    "seen-past-end": ({"last_seen_indices": {"0": 30}}, "past the end"),
    "seen-list": ({"last_seen_indices": [5]}, r"\['last_seen_indices'\]` must map each"),
    "seen-empty": ({"last_seen_indices": {}}, r"\['last_seen_indices'\]` must map each"),
    "seen-other-worker": ({"last_seen_indices": {"1": 5}}, r"\['last_seen_indices'\]` must map each"),
    "seen-too-few-workers": (
        {"worker_count": 3, "last_seen_indices": {"0": 5}},
        "must map each of Grain's 3",
    ),
    "worker-count-string": ({"worker_count": "0"}, r"\['worker_count'\]` must be an int"),
    "worker-count-null": ({"worker_count": None}, r"\['worker_count'\]` must be an int"),
    "last-worker-string": ({"last_worker_index": "x"}, r"\['last_worker_index'\]` must be an int"),
    "version-1": ({"version": 1}, "has version 1"),
    "version-missing": ({"version": None}, "has version None"),
    "other-sampler": (
        {
            "sampler": "IndexSampler(num_records=30, shard_options=NoSharding(), shuffle=True, "
            "num_epochs=1, seed=4)"
        },
        "another sampler",
    ),
    "other-source": ({"data_source": "RangeDataSource(start=1, stop=31, step=1)"}, "another data_source"),
    "source-null": ({"data_source": None}, "another data_source"),
}


@pytest.mark.parametrize("field", list(GRAIN_FIELDS))
def test_a_grain_state_with_a_wrong_field_is_a_value_error_naming_it(field: str) -> None:
    fields, message = GRAIN_FIELDS[field]
    with pytest.raises(ValueError, match=message):
        iter(state_pipeline()).set_state(grain_form(**fields))


def test_a_good_grain_state_resumes_where_grain_stopped() -> None:
    wanted = [plain(b) for b in state_pipeline()]
    iterator = iter(state_pipeline())
    iterator.set_state(grain_form(last_seen_indices={"0": 5}))  # records 0..5 delivered: two batches
    with iterator:
        assert [plain(b) for b in iterator] == wanted[2:]


class Spread(FlatMapTransform):
    """0 to 3 elements per record, so that records split across batches."""

    def flat_map(self, element: Any) -> Iterable[Any]:
        return [element * 10 + k for k in range(element % 4)]


def spread_pipeline(workers: Workers, num_epochs: int = 2) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, 12),
        sampler=IndexSampler(12, shuffle=True, num_epochs=num_epochs, seed=2),
        operations=[Spread(), Batch(5)],
        worker_count=workers,
    )


async def take_async(iterator: Any, count: int | None = None) -> list[Any]:
    got: list[Any] = []
    while count is None or len(got) < count:
        try:
            got.append(plain(await anext(iterator)))
        except StopAsyncIteration:
            break
    return got


@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_set_state_back_to_an_earlier_state_in_the_middle_of_a_run(workers: Workers, is_async: bool) -> None:
    wanted = [plain(b) for b in spread_pipeline(0)]
    loader = spread_pipeline(workers)
    if is_async:

        async def run() -> list[Any]:
            iterator = aiter(loader)
            head = await take_async(iterator, 3)
            state = iterator.get_state()
            await take_async(iterator, 2)
            iterator.set_state(state)
            rest = await take_async(iterator)
            await iterator.aclose()
            return head + rest

        assert asyncio.run(run()) == wanted
    else:
        with iter(loader) as iterator:
            head = [plain(next(iterator)) for _ in range(3)]
            state = iterator.get_state()
            [next(iterator) for _ in range(2)]
            iterator.set_state(state)
            assert head + [plain(b) for b in iterator] == wanted


@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_a_state_set_after_start_prefetch_wins(workers: Workers) -> None:
    wanted = [plain(b) for b in spread_pipeline(0)]
    state = state_after(spread_pipeline(0), 3)
    with iter(spread_pipeline(workers)) as iterator:
        iterator.start_prefetch()
        iterator.set_state(state)
        assert [plain(b) for b in iterator] == wanted[3:]


@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_a_state_taken_at_the_very_end_resumes_to_nothing(workers: Workers) -> None:
    with iter(spread_pipeline(workers)) as iterator:
        list(iterator)
        state = iterator.get_state()
    resumed = iter(spread_pipeline(0))
    resumed.set_state(state)
    with resumed:
        assert list(resumed) == []


@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 0), ("auto", 1), (1, "auto")], ids=str)
def test_resume_at_every_output_across_the_epoch_boundary(before: Workers, after: Workers) -> None:
    wanted = [plain(b) for b in spread_pipeline(0)]
    with iter(spread_pipeline(before)) as iterator:
        states = [iterator.get_state()]
        for _ in wanted:
            next(iterator)
            states.append(iterator.get_state())
    for count, state in enumerate(states):
        resumed = iter(spread_pipeline(after))
        resumed.set_state(state)
        with resumed:
            assert wanted[:count] + [plain(b) for b in resumed] == wanted, f"after {count} outputs"


class FailOnce(MapTransform):
    def __init__(self, bad: int | None) -> None:
        self.bad = bad

    def map(self, element: Any) -> Any:
        if element == self.bad:
            raise ValueError(f"bad {element}")
        return element


@pytest.mark.parametrize("flat", [False, True], ids=["records", "flat-map"])
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_the_state_after_an_error_resumes_the_rest_once_fixed(
    flat: bool, workers: Workers, is_async: bool
) -> None:
    def loader(bad: int | None, count: Workers) -> DataLoader:
        operations = [FailOnce(bad), *([Spread()] if flat else []), Batch(4)]
        return make(operations, count, shuffle=True, seed=5)

    wanted = [plain(b) for b in loader(None, 0)]
    bad = IndexSampler(20, num_epochs=1, shuffle=True, seed=5)[9].record_key
    if is_async:

        async def run() -> tuple[list[Any], BaseException | None, bytes]:
            iterator = aiter(loader(bad, workers))
            got: list[Any] = []
            try:
                async for batch in iterator:
                    got.append(plain(batch))
            except ValueError as caught:
                return got, caught, iterator.get_state()
            return got, None, iterator.get_state()

        got, error, state = asyncio.run(run())
    else:
        iterator = iter(loader(bad, workers))
        got, error = [], None
        try:
            for batch in iterator:
                got.append(plain(batch))
        except ValueError as caught:
            error = caught
        state = iterator.get_state()
    assert str(error) == f"bad {bad}"
    resumed = iter(loader(None, 2))
    resumed.set_state(state)
    with resumed:
        assert got + [plain(b) for b in resumed] == wanted


# 4. Closing from every side.


def filtered(workers: Workers, batched: bool, n: int = 200) -> DataLoader:
    operations: list[Any] = [KeepSome(), Batch(4)] if batched else [KeepSome()]
    return make(operations, workers, n=n, shuffle=True)


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_close_twice_then_next_and_get_state(batched: bool, workers: Workers) -> None:
    wanted = [plain(x) for x in filtered(0, batched)]
    iterator = iter(filtered(workers, batched))
    assert [plain(next(iterator)) for _ in range(5)] == wanted[:5]
    state = iterator.get_state()
    iterator.close()
    iterator.close()
    assert iterator.get_state() == state
    with pytest.raises(StopIteration):
        next(iterator)
    assert iterator.get_state() == state
    assert list(iterator) == []


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_two_iterators_of_one_loader_at_once(batched: bool, workers: Workers) -> None:
    wanted = [plain(x) for x in filtered(0, batched)]
    loader = filtered(workers, batched)
    with iter(loader) as first, iter(loader) as second:
        one: list[Any] = []
        two: list[Any] = []
        for x, y in zip(first, second, strict=False):
            one.append(plain(x))
            two.append(plain(y))
        one += [plain(x) for x in first]
        two += [plain(y) for y in second]
    assert one == wanted
    assert two == wanted


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_a_sync_and_an_async_iterator_of_one_loader_at_once(batched: bool, workers: Workers) -> None:
    wanted = [plain(x) for x in filtered(0, batched)]
    loader = filtered(workers, batched)

    async def both() -> tuple[list[Any], list[Any]]:
        by_async: list[Any] = []
        with iter(loader) as sync_iterator:
            by_sync: list[Any] = []
            async for x in loader:
                by_async.append(plain(x))
                by_sync.extend(plain(y) for y in [next(sync_iterator, None)] if y is not None)
            by_sync += [plain(y) for y in sync_iterator]
        return by_async, by_sync

    by_async, by_sync = asyncio.run(both())
    assert by_async == wanted
    assert by_sync == wanted


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_an_iterator_dropped_in_the_middle_is_collected(batched: bool, workers: Workers) -> None:
    iterator = iter(filtered(workers, batched))
    next(iterator)
    next(iterator)
    del iterator
    gc.collect()  # the fixture then checks that every thread was joined


class Gate:
    """Reads from key `first` on wait until `release` is set (5 s at most); `entered` is
    set by the first of them."""

    def __init__(self, size: int, first: int) -> None:
        self.size, self.first = size, first
        self.entered = threading.Event()
        self.release = threading.Event()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        if key >= self.first:
            self.entered.set()
            self.release.wait(5)
        return key


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize("first", [0, 10], ids=["at-once", "later"])
def test_close_from_another_thread_ends_a_waiting_next_with_auto_workers(batched: bool, first: int) -> None:
    source = Gate(100, first)
    operations: list[Any] = [KeepSome(), Batch(2)] if batched else [KeepSome()]
    iterator = iter(make(operations, "auto", source=source, n=100))
    got: list[Any] = []
    ended: list[str] = []

    def consume() -> None:
        got.extend(plain(x) for x in iterator)
        ended.append("end")

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert source.entered.wait(5)
    iterator.close()
    source.release.set()
    consumer.join(5)
    assert ended == ["end"]
    wanted = [plain(x) for x in make(operations, 0, n=100)]
    assert got == wanted[: len(got)]
    opened = Gate(100, first)
    opened.release.set()
    resumed = iter(make(operations, 2, source=opened, n=100))
    resumed.set_state(iterator.get_state())  # counts exactly what next() returned
    with resumed:
        assert got + [plain(x) for x in resumed] == wanted


# 5. The same output for every worker count, and after every resume.


class Noise(RandomMapTransform):
    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return element * 1000 + int(rng.integers(1000))


class KeepNoisy(FilterTransform):
    def filter(self, element: Any) -> bool:
        return bool((element // 1000) % 3 != 0)


class SpreadNoisy(FlatMapTransform):
    def flat_map(self, element: Any) -> Iterable[Any]:
        return [element * 10 + k for k in range((element // 1000) % 4)]


class BatchNoise(RandomMapTransform):
    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return element + rng.integers(0, 5, size=np.shape(element))


class SplitBatch(FlatMapTransform):
    def flat_map(self, element: Any) -> Iterable[Any]:
        cut = (int(element[0]) // 1000) % 3
        return [element[:cut], element[cut:]]


PIPELINES: dict[str, Callable[[bool], list[Any]]] = {
    "random-filter-flat-batch": lambda drop: [
        Noise(),
        KeepNoisy(),
        SpreadNoisy(),
        Batch(4, drop_remainder=drop),
    ],
    "flat-batch-random": lambda drop: [Noise(), SpreadNoisy(), Batch(3, drop_remainder=drop), BatchNoise()],
    "batch-flat": lambda drop: [Noise(), Batch(3, drop_remainder=drop), SplitBatch()],
}
SHARDS = {
    "unsharded": NoSharding(),
    "shard-1-of-3": ShardOptions(1, 3),
    "shard-0-of-2-drop": ShardOptions(0, 2, drop_remainder=True),
}


def noisy(name: str, drop: bool, shard: str, num_epochs: int, workers: Workers) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, 23),
        sampler=IndexSampler(23, shuffle=True, num_epochs=num_epochs, seed=7, shard_options=SHARDS[shard]),
        operations=PIPELINES[name](drop),
        worker_count=workers,
    )


NOISY = [
    pytest.param(name, drop, shard, epochs, id=f"{name}-{'drop' if drop else 'keep'}-{shard}-{epochs}epochs")
    for name in PIPELINES
    for drop in (False, True)
    for shard in SHARDS
    for epochs in (1, 2)
]


@pytest.mark.parametrize(("name", "drop", "shard", "epochs"), NOISY)
def test_every_worker_count_gives_the_reference_output(
    name: str, drop: bool, shard: str, epochs: int
) -> None:
    sampler = IndexSampler(23, shuffle=True, num_epochs=epochs, seed=7, shard_options=SHARDS[shard])
    wanted = [canonical(x) for x in reference_outputs(range(23), sampler, PIPELINES[name](drop))]
    assert wanted
    for workers in (0, 1, 2, "auto"):
        for is_async in (False, True):
            got, error = collect(noisy(name, drop, shard, epochs, workers), is_async)
            assert error is None
            assert [canonical(x) for x in got] == wanted, f"worker_count={workers}, async={is_async}"


@pytest.mark.parametrize(("name", "drop", "shard", "epochs"), NOISY)
def test_resume_at_every_position_with_another_worker_count(
    name: str, drop: bool, shard: str, epochs: int
) -> None:
    wanted = [canonical(x) for x in noisy(name, drop, shard, epochs, 0)]
    pairs: list[tuple[Workers, Workers]] = [(0, 2), (2, 0), ("auto", 1), (1, "auto")]
    for count in range(len(wanted) + 1):
        before, after = pairs[count % len(pairs)]
        with iter(noisy(name, drop, shard, epochs, before)) as iterator:
            head = [canonical(next(iterator)) for _ in range(count)]
            state = iterator.get_state()
        resumed = iter(noisy(name, drop, shard, epochs, after))
        resumed.set_state(state)
        with resumed:
            assert head + [canonical(x) for x in resumed] == wanted, f"resumed after {count} outputs"


# 6. Bad arguments: refused at once, naming the parameter.


class AsyncKeep(FilterTransform):
    async def filter(self, element: Any) -> bool:  # type: ignore[override]
        return True


class AsyncNoise(RandomMapTransform):
    async def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return element


class AsyncSpread(FlatMapTransform):
    async def flat_map(self, element: Any) -> Any:
        return [element]


async def async_stack(elements: list[Any]) -> Any:
    return np.stack(elements)


def loader_with(**overrides: Any) -> DataLoader:
    arguments: dict[str, Any] = {
        "data_source": RangeDataSource(0, 10),
        "sampler": IndexSampler(10, num_epochs=1),
        **overrides,
    }
    return DataLoader(**arguments)


def call(factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    """`factory(*args, **kwargs)`, to be called later (its arguments are wrong on purpose)."""
    return lambda: factory(*args, **kwargs)


# name: (what to call, the exception, what its message must say)
BAD_ARGUMENTS: dict[str, tuple[Callable[[], Any], type[Exception], str]] = {
    "worker_count-str-digit": (
        call(loader_with, worker_count="2"),
        ValueError,
        "`worker_count` must be an int",
    ),
    "worker_count-AUTO": (call(loader_with, worker_count="AUTO"), ValueError, "`worker_count`.*'AUTO'"),
    "worker_count-list": (call(loader_with, worker_count=[2]), TypeError, "`worker_count` must be an int"),
    "worker_count-bool": (call(loader_with, worker_count=True), TypeError, "`worker_count` must be an int"),
    "worker_buffer_size-negative": (
        call(loader_with, worker_buffer_size=-1),
        ValueError,
        "`worker_buffer_size`",
    ),
    "worker_buffer_size-float": (
        call(loader_with, worker_buffer_size=1.5),
        TypeError,
        "`worker_buffer_size`",
    ),
    "worker_buffer_size-None": (
        call(loader_with, worker_buffer_size=None),
        TypeError,
        "`worker_buffer_size`",
    ),
    "shard_options-tuple": (call(loader_with, shard_options=(0, 2)), TypeError, "`shard_options` must be"),
    "shard_options-class": (
        call(loader_with, shard_options=NoSharding),
        TypeError,
        "`shard_options` must be",
    ),
    "read_options-class": (call(loader_with, read_options=ReadOptions), TypeError, "`read_options` must be"),
    "executor-None": (call(loader_with, executor=None), ValueError, "`executor` must be one of"),
    "executor-list": (call(loader_with, executor=["thread"]), ValueError, "`executor` must be one of"),
    "device_put-True": (call(loader_with, device_put=True), TypeError, "`device_put` must be"),
    "memory_limit_bytes-without-auto": (
        call(loader_with, memory_limit_bytes=10**9),
        ValueError,
        "`memory_limit_bytes` bounds",
    ),
    "memory_limit_bytes-zero": (
        call(loader_with, worker_count="auto", memory_limit_bytes=0),
        ValueError,
        "`memory_limit_bytes`",
    ),
    "memory_limit_bytes-str": (
        call(loader_with, worker_count="auto", memory_limit_bytes="1G"),
        TypeError,
        "`memory_limit_bytes`",
    ),
    "operations-None": (call(loader_with, operations=None), TypeError, "`operations` must be a list"),
    "operations-dict": (call(loader_with, operations={}), TypeError, "`operations` must be a list"),
    "operations-None-item": (call(loader_with, operations=[None]), TypeError, r"`operations\[0\]` must be"),
    "data_source-None": (call(loader_with, data_source=None), TypeError, "`data_source`"),
    "data_source-short": (call(loader_with, data_source=[1, 2]), ValueError, "`data_source` holds only 2"),
    "sampler-None": (call(loader_with, sampler=None), TypeError, "`sampler` must have __getitem__"),
    "num_records-zero": (call(IndexSampler, 0), ValueError, "`num_records`"),
    "num_records-float": (call(IndexSampler, 1.5), TypeError, "`num_records`"),
    "num_records-str": (call(IndexSampler, "10"), TypeError, "`num_records`"),
    "num_records-bool": (call(IndexSampler, True), TypeError, "`num_records`"),
    "shuffle-int": (call(IndexSampler, 10, shuffle=1, seed=0), TypeError, "`shuffle`"),
    "shuffle-without-seed": (call(IndexSampler, 10, shuffle=True), ValueError, "`seed`"),
    "seed-negative": (call(IndexSampler, 10, shuffle=True, seed=-1), ValueError, "`seed`"),
    "seed-too-large": (call(IndexSampler, 10, shuffle=True, seed=2**32), ValueError, "`seed`"),
    "seed-float": (call(IndexSampler, 10, shuffle=True, seed=1.0), TypeError, "`seed`"),
    "seed-bool": (call(IndexSampler, 10, shuffle=True, seed=True), TypeError, "`seed`"),
    "num_epochs-zero": (call(IndexSampler, 10, num_epochs=0), ValueError, "`num_epochs`"),
    "num_epochs-float": (call(IndexSampler, 10, num_epochs=1.0), TypeError, "`num_epochs`"),
    "sampler-shard_options-tuple": (
        call(IndexSampler, 10, shard_options=(0, 2)),
        TypeError,
        "`shard_options`",
    ),
    "sequential-num_records-zero": (call(SequentialSampler, 0), ValueError, "`num_records`"),
    "sequential-seed-negative": (call(SequentialSampler, 10, seed=-1), ValueError, "`seed`"),
    "shard_index-negative": (call(ShardOptions, -1, 2), ValueError, "`shard_index`"),
    "shard_index-too-large": (call(ShardOptions, 2, 2), ValueError, "`shard_index`"),
    "shard_index-float": (call(ShardOptions, 0.0, 2), TypeError, "`shard_index`"),
    "shard_count-zero": (call(ShardOptions, 0, 0), ValueError, "`shard_count`"),
    "shard_count-str": (call(ShardOptions, 0, "2"), TypeError, "`shard_count`"),
    "batch_size-negative": (call(Batch, -1), ValueError, "`batch_size`"),
    "batch_size-float": (call(Batch, 2.0), TypeError, "`batch_size`"),
    "batch_size-bool": (call(Batch, True), TypeError, "`batch_size`"),
    "batch_size-None": (call(Batch, None), TypeError, "`batch_size`"),
    "drop_remainder-None": (call(Batch, 2, drop_remainder=None), TypeError, "`drop_remainder`"),
    "drop_remainder-str": (call(Batch, 2, drop_remainder="False"), TypeError, "`drop_remainder`"),
    "batch_fn-int": (call(Batch, 2, batch_fn=1), TypeError, "`batch_fn`"),
    "num_threads-float": (call(ReadOptions, num_threads=1.5), TypeError, "`num_threads`"),
    "num_threads-None": (call(ReadOptions, num_threads=None), TypeError, "`num_threads`"),
    "num_threads-bool": (call(ReadOptions, num_threads=True), TypeError, "`num_threads`"),
    "prefetch_buffer_size-float": (
        call(ReadOptions, prefetch_buffer_size=1.5),
        TypeError,
        "`prefetch_buffer_size`",
    ),
    "prefetch_buffer_size-None": (
        call(ReadOptions, prefetch_buffer_size=None),
        TypeError,
        "`prefetch_buffer_size`",
    ),
    "device_put-buffer_size-zero": (call(DevicePut, buffer_size=0), ValueError, "`buffer_size`"),
    "device_put-buffer_size-str": (call(DevicePut, buffer_size="2"), TypeError, "`buffer_size`"),
    "range-start-str": (call(RangeDataSource, "0", 10), TypeError, "`start`"),
    "range-stop-float": (call(RangeDataSource, 0, 1.5), TypeError, "`stop`"),
    "range-step-None": (call(RangeDataSource, 0, 10, None), TypeError, "`step`"),
    # Found by the review, and fixed: each was accepted, or failed naming nothing.
    "data_source-len-float": (call(loader_with, data_source=LenIs(10.0)), TypeError, r"`len\(data_source\)`"),
    "data_source-len-negative": (
        call(loader_with, data_source=LenIs(-1)),
        ValueError,
        r"`len\(data_source\)`",
    ),
    "data_source-len-huge": (
        call(loader_with, data_source=LenIs(2**70)),
        ValueError,
        r"`len\(data_source\)`",
    ),
    "data_source-class": (
        call(loader_with, data_source=RangeDataSource),
        TypeError,
        "is the class RangeDataSource",
    ),
    "sampler-class": (
        call(loader_with, sampler=IndexSampler),
        TypeError,
        "`sampler` is the class IndexSampler",
    ),
    "operations-transform-class": (
        call(loader_with, operations=[AddOne]),
        TypeError,
        r"`operations\[0\]` is the class AddOne, not an instance: write AddOne\(\)",
    ),
    "operations-batch-class": (call(loader_with, operations=[Batch]), TypeError, "is the class Batch"),
    "async-filter": (call(loader_with, operations=[AsyncKeep()]), TypeError, "must not be `async def`"),
    "async-random_map": (call(loader_with, operations=[AsyncNoise()]), TypeError, "must not be `async def`"),
    "async-flat_map": (call(loader_with, operations=[AsyncSpread()]), TypeError, "must not be `async def`"),
    "async-batch_fn": (call(Batch, 2, batch_fn=async_stack), TypeError, "`batch_fn` must not be"),
    "shard-drop_remainder-int": (call(ShardOptions, 0, 2, drop_remainder=1), TypeError, "`drop_remainder`"),
    "shard-drop_remainder-str": (
        call(ShardOptions, 0, 2, drop_remainder="no"),
        TypeError,
        "`drop_remainder`",
    ),
    "num_records-past-int64": (
        call(IndexSampler, 2**64 + 3, shuffle=True, seed=0),
        ValueError,
        "`num_records`",
    ),
    "num_epochs-past-int64": (call(IndexSampler, 2**40, num_epochs=2**30), ValueError, "`num_epochs`"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_a_bad_argument_is_refused_at_once_naming_it(case: str) -> None:
    make_it, error, message = BAD_ARGUMENTS[case]
    with pytest.raises(error, match=message):
        make_it()


@pytest.mark.parametrize(
    ("read_options", "worker_buffer_size"),
    [(ReadOptions(0, 0), 0), (ReadOptions(1, 0), 0), (ReadOptions(0, 1), 1), (ReadOptions(16, 16), 0)],
    ids=["all-zero", "threads-no-buffer", "buffer-no-threads", "no-worker-buffer"],
)
@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_the_smallest_buffers_change_nothing(
    read_options: ReadOptions, worker_buffer_size: int, workers: Workers, is_async: bool
) -> None:
    def loader(count: Workers, options: ReadOptions | None = None, buffer: int = 1) -> DataLoader:
        return DataLoader(
            data_source=RangeDataSource(0, 50),
            sampler=IndexSampler(50, num_epochs=2, shuffle=True, seed=0),
            operations=[Spread(), KeepSome(), Batch(3)],
            worker_count=count,
            worker_buffer_size=buffer,
            read_options=options,
        )

    wanted = [plain(b) for b in loader(0)]
    got, error = collect(loader(workers, read_options, worker_buffer_size), is_async)
    assert error is None
    assert [plain(b) for b in got] == wanted


# 7. Found by the review, and fixed.


def test_numpy_ints_and_bools_are_taken_as_grain_takes_them() -> None:
    """`Batch(np.int64(4))` and friends: stored as Python's, so that a state is still JSON."""
    loader = DataLoader(
        data_source=RangeDataSource(0, 20),
        sampler=IndexSampler(np.int64(20), ShardOptions(np.int64(0), np.int64(1)), num_epochs=np.int64(1)),
        operations=[Batch(np.int64(4), drop_remainder=np.bool_(True))],
        worker_count=np.int64(2),
        read_options=ReadOptions(np.int64(4), np.int64(8)),
    )
    with iter(loader) as iterator:
        assert [plain(b) for b in iterator] == [list(range(i, i + 4)) for i in range(0, 20, 4)]
        assert json.loads(iterator.get_state())["aioloader"]["position"]["index"] == 20
    assert type(Batch(np.int64(4)).batch_size) is int


def test_a_state_does_not_resume_on_another_range_of_the_same_length() -> None:
    first = state_after(make([Batch(3)], source=RangeDataSource(0, 30), n=30), 2)
    with pytest.raises(ValueError, match="another data_source"):
        iter(make([Batch(3)], source=RangeDataSource(100, 130), n=30)).set_state(first)


class Tagged(Exception):
    """An exception whose `__notes__` is a tuple: `add_note` refuses it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.__notes__ = ("from the tokenizer",)


class RaisesTagged(MapTransform):
    def map(self, element: Any) -> Any:
        if element == 6:
            raise Tagged("bad record 6")
        return element


@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_an_error_that_refuses_notes_still_arrives_in_its_place(workers: Workers, is_async: bool) -> None:
    got, error = collect(make([RaisesTagged()], workers), is_async)
    assert got == list(range(6))
    assert type(error) is Tagged
    assert str(error) == "bad record 6"
    assert "from the tokenizer" in notes(error)
    assert "index=6, record_key=6" in notes(error)


class Fan(FlatMapTransform):
    max_fan_out = 3

    def flat_map(self, element: Any) -> Any:
        return range(element % 5)


@pytest.mark.parametrize(("workers", "is_async"), MODES)
def test_max_fan_out_bounds_a_records_elements(workers: Workers, is_async: bool) -> None:
    got, error = collect(make([Fan()], workers), is_async)
    assert got == [0, 0, 1, 0, 1, 2]  # records 0..3; record 4 gives 4 elements
    assert type(error) is ValueError
    assert "more than max_fan_out=3" in str(error)
    assert "index=4, record_key=4" in notes(error)


class Forever(FlatMapTransform):
    def __init__(self) -> None:
        self.started = threading.Event()

    def __deepcopy__(self, memo: dict[int, Any]) -> Forever:
        return self

    def flat_map(self, element: Any) -> Any:
        self.started.set()
        while True:
            yield element


@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_close_from_another_thread_stops_a_flat_map_without_end(workers: Workers) -> None:
    forever = Forever()
    iterator = iter(make([forever], workers))
    outcome: list[Any] = []
    consumer = threading.Thread(target=lambda: outcome.append(next(iterator, "ended")))
    consumer.start()
    assert forever.started.wait(10)
    iterator.close()
    consumer.join(10)
    assert not consumer.is_alive(), "next() still runs the generator after close()"
    assert outcome == ["ended"]


@pytest.mark.parametrize("where", ["map", "source"])
def test_close_from_another_thread_ends_an_await_at_worker_count_0(where: str) -> None:
    """`for` at `worker_count=0` awaits on a private loop: close() cancels the await."""
    entered = threading.Event()

    class Hangs:
        def __len__(self) -> int:
            return 20

        def __getitem__(self, key: int) -> int:
            return key

        async def aget(self, key: int) -> int:
            return await self.map(key)

        async def map(self, element: int) -> int:
            if element == 3:
                entered.set()
                await asyncio.sleep(60)
            return element

    hangs = Hangs()
    operations = [hangs.map] if where == "map" else []
    source = RangeDataSource(0, 20) if where == "map" else hangs
    iterator = iter(make(operations, 0, source))
    outcome: list[Any] = []
    consumer = threading.Thread(target=lambda: outcome.append(list(iterator)))
    consumer.start()
    assert entered.wait(10)
    iterator.close()
    consumer.join(10)
    assert not consumer.is_alive(), "next() still awaits after close()"
    assert len(outcome) == 1
    assert outcome[0] == list(range(len(outcome[0])))


def test_a_grain_state_claiming_countless_workers_is_refused_at_once() -> None:
    loader = make([])
    with iter(loader) as iterator:
        document = json.loads(iterator.get_state())
    grain = {key: value for key, value in document.items() if key != "aioloader"}
    for count, message in [(10**12, "last_seen_indices"), (-1, "worker_count")]:
        with iter(loader) as iterator, pytest.raises(ValueError, match=message):
            iterator.set_state(json.dumps({**grain, "worker_count": count}).encode())


def test_a_state_nested_past_the_parsers_depth_is_a_value_error() -> None:
    with iter(make([])) as iterator, pytest.raises(ValueError, match="is not the JSON"):
        iterator.set_state(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize("workers", [0, 2])
def test_get_state_from_another_thread_while_the_consumer_iterates(workers: Workers) -> None:
    """A checkpointing or monitoring thread: every state it reads is one the run passes."""
    loader = DataLoader(
        data_source=RangeDataSource(0, 3000),
        sampler=IndexSampler(3000, num_epochs=1, shuffle=True, seed=1),
        operations=[Spread(), Batch(3)],
        worker_count=workers,
    )
    iterator = iter(loader)
    done, seen, failures = threading.Event(), list[int](), list[BaseException]()

    def poll() -> None:
        while not done.is_set():
            try:
                seen.append(json.loads(iterator.get_state())["aioloader"]["position"]["index"])
            except BaseException as error:
                failures.append(error)
                return

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for _ in iterator:
            pass
    finally:
        done.set()
        poller.join()
    assert failures == []
    assert seen == sorted(seen)  # the position never goes back


class Returns:
    """A source whose `__getitems__` returns `what` for the keys."""

    def __init__(self, what: Callable[[list[int]], Any]) -> None:
        self.what = what

    def __len__(self) -> int:
        return 20

    def __getitem__(self, key: int) -> int:
        return key

    def __getitems__(self, keys: list[int]) -> Any:
        return self.what(keys)


@pytest.mark.parametrize(
    "what",
    [lambda keys: {k: k for k in keys}, lambda keys: None, lambda keys: set(keys), lambda keys: "ab"],
    ids=["dict", "None", "set", "str"],
)
@pytest.mark.parametrize("workers", [0, 2])
def test_getitems_that_returns_no_sequence_of_records_fails_naming_it(
    what: Callable[[list[int]], Any], workers: Workers
) -> None:
    got, error = collect(make([], workers, Returns(what)), False)
    assert got == []
    assert type(error) is TypeError
    assert "Returns.__getitems__ must return a sequence of records" in str(error)


@pytest.mark.parametrize("workers", [0, 2])
def test_getitems_may_return_an_array_of_records(workers: Workers) -> None:
    got, error = collect(make([], workers, Returns(lambda keys: np.asarray(keys) * 10)), False)
    assert error is None
    assert got == [10 * k for k in range(20)]


class SortsKeysThenFails(Returns):
    """Sorts the keys it is given in place (for locality), then fails: the keys read one by one
    after it are the loader's, in the sampler's order, and record 7 fails under its own name."""

    def __getitems__(self, keys: list[int]) -> Any:
        keys.sort(reverse=True)
        raise OSError("transient read error")

    def __getitem__(self, key: int) -> int:
        if key == 7:
            raise ValueError("bad record 7")
        return key


@pytest.mark.parametrize("workers", [0, 2, "auto"])
def test_getitems_that_changes_its_keys_changes_no_record(workers: Workers) -> None:
    got, error = collect(make([], workers, SortsKeysThenFails(lambda keys: None)), False)
    assert got == list(range(7))
    assert type(error) is ValueError
    assert "index=7, record_key=7" in "\n".join(getattr(error, "__notes__", []))


class CallsItsOwnIterator:
    """A map that, at record `key`, calls `call` on the iterator that runs it."""

    def __init__(self, call: str, key: int = 5) -> None:
        self.call, self.key = call, key
        self.iterator: Any = None
        self.state: bytes | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> CallsItsOwnIterator:
        return self  # the workers call the same iterator

    def __call__(self, x: int) -> int:
        if x == self.key:
            if self.call == "next":
                next(self.iterator)
            else:
                self.iterator.set_state(self.state)
        return x


@repeated
@pytest.mark.parametrize("device", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("call", ["next", "set_state"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_pipeline_calling_its_own_iterator_is_an_error_at_its_record(
    workers: Workers, call: str, device: bool, repeat: int
) -> None:
    """In the caller's thread, `itertools.chain` entered again crashed the interpreter and a
    `set_state` ended the iteration silently; in a worker, the call waited for itself."""
    own = CallsItsOwnIterator(call)
    loader = DataLoader(
        data_source=RangeDataSource(0, 20),
        sampler=IndexSampler(20, num_epochs=1),
        operations=[own],
        worker_count=workers,
        device_put=DevicePut() if device else None,
    )
    got = []
    with iter(loader) as iterator:
        own.iterator, own.state = iterator, iterator.get_state()
        with pytest.raises(RuntimeError, match=f"DataLoaderIterator.{call}\\(\\) was called from") as raised:
            got.extend(int(x) for x in iterator)
    assert got == [0, 1, 2, 3, 4]
    assert "index=5, record_key=5" in notes(raised.value)


class SlowReadCallsItsOwnIterator(CallsItsOwnIterator):
    """A source of 2 ms reads (the read pool takes them: `ReadOptions.num_threads`) whose read
    of key `key` calls `call` on the iterator that reads it."""

    def __len__(self) -> int:
        return 200

    def __getitem__(self, key: int) -> int:
        threading.Event().wait(0.002)
        return self(key)


@repeated
@pytest.mark.parametrize("prefetch", [False, True], ids=["", "start_prefetch"])
@pytest.mark.parametrize("call", ["next", "set_state"])
@pytest.mark.parametrize("key", [3, 100])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_source_calling_its_own_iterator_from_a_read_thread_is_an_error_at_its_record(
    workers: int, key: int, call: str, prefetch: bool, repeat: int
) -> None:
    """With workers, record 3 is read by a worker or a read thread, record 100 by a read
    thread; at `worker_count=0`, by the caller's thread, or after `start_prefetch()` record 3
    by a thread of the early read. The read threads, started by a worker, the consumer's
    thread or `start_prefetch()`, waited for the turn that the `next()` waiting for their
    read held (a hang)."""
    source = SlowReadCallsItsOwnIterator(call, key)
    loader = DataLoader(
        data_source=source,
        sampler=IndexSampler(200, num_epochs=1),
        operations=[Batch(8)],
        worker_count=workers,
        read_options=ReadOptions(num_threads=4),
    )
    got: list[int] = []
    with iter(loader) as iterator:
        source.iterator, source.state = iterator, iterator.get_state()
        if prefetch:
            iterator.start_prefetch()
        with pytest.raises(RuntimeError, match=f"DataLoaderIterator.{call}\\(\\) was called from") as raised:
            got.extend(x for batch in iterator for x in batch.tolist())
    assert got == list(range(key - key % 8))
    assert f"index={key}, record_key={key}" in notes(raised.value)


_USER_VARIABLE: contextvars.ContextVar[str] = contextvars.ContextVar("user_variable", default="unset")


@repeated
@pytest.mark.parametrize("workers", [0, 2])
def test_the_pipelines_threads_see_the_context_of_the_thread_that_iterates(
    workers: Workers, repeat: int
) -> None:
    """Worker and read threads copy the context of the `next()` that starts them (as an
    `async def` transform's task does), so a transform reads the caller's context variables."""

    def reads_the_variable(x: int) -> tuple[int, str]:
        return x, _USER_VARIABLE.get()

    loader = DataLoader(
        data_source=RangeDataSource(0, 50),
        sampler=IndexSampler(50, num_epochs=1),
        operations=[reads_the_variable],
        worker_count=workers,
    )
    token = _USER_VARIABLE.set("set by the caller")
    try:
        got = [(int(x), str(seen)) for x, seen in loader]
    finally:
        _USER_VARIABLE.reset(token)
    assert got == [(x, "set by the caller") for x in range(50)]


def batched(transform: Any, records: int, batch: int) -> DataLoader:
    """`transform` then `Batch(batch)` over `records` records in order, on 2 workers."""
    return DataLoader(
        data_source=RangeDataSource(0, records),
        sampler=IndexSampler(records, num_epochs=1),
        operations=[transform, Batch(batch)],
        worker_count=2,
    )


class GrowsACache(MapTransform):
    """A transform whose state grows on every record (a memo of what it has seen)."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, int], int] = {}

    def map(self, element: int) -> int:
        for i in range(50):
            self.cache[element, i] = i
        return element


@repeated
def test_workers_copy_a_transform_whose_state_grows_on_every_record(repeat: int) -> None:
    """A worker deep-copied the loader's own transform while the consumer's thread ran it:
    "dictionary changed size during iteration" ended 10 of 12 such tests on 3.13t."""
    for _ in range(2):
        assert sum(len(batch) for batch in batched(GrowsACache(), 10_000, 32)) == 10_000


class Midway:
    """A value in a transform's cache. Its copies on other threads than `consumer` (the first
    one only, with `first_only`) stop the deep copy of the cache midway until a record has
    run since (`ran`)."""

    def __init__(self, consumer: threading.Thread, first_only: bool = False) -> None:
        self.consumer, self.first_only = consumer, first_only
        self.copying, self.ran = threading.Event(), threading.Event()
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> Midway:
        with self._lock:
            stops = threading.current_thread() is not self.consumer
            stops &= not (self.first_only and self.copying.is_set())
            self.copying.set() if stops else None
        if stops:
            self.ran.wait(30)
        return self


class AddsWhileCopied(MapTransform):
    """On the consumer's thread, each record waits until a worker copies the transform, then
    adds a key to its cache."""

    def __init__(self, midway: Midway) -> None:
        self.cache: dict[Any, Any] = {"midway": midway, "tail": 0}

    def map(self, element: int) -> int:
        midway = self.cache["midway"]
        if threading.current_thread() is midway.consumer:
            assert midway.copying.wait(30), "no worker copied the transform"
            self.cache[element] = element
            midway.ran.set()
        return element


@repeated
def test_workers_copy_the_operations_as_they_were_before_any_record_ran(repeat: int) -> None:
    """Forced, not timed: each worker's copy of the transform stops midway through its cache
    until the consumer's thread has mapped a record, which adds a key to the cache. Copied
    from the loader's own transform, the copy failed ("dictionary changed size during
    iteration"); the workers copy a pattern made before anything ran, which nothing runs."""
    midway = Midway(threading.current_thread())
    transform = AddsWhileCopied(midway)
    with iter(batched(transform, 2_000, 4)) as batches:
        assert sum(len(batch) for batch in batches) == 2_000
    assert len(transform.cache) > 2  # the loader's own transform ran records while copied


class AddsWhileCopiedOnTheLoop(MapTransform):
    """An `async def` map (awaited on the loader's event loop) that adds a key to its cache on
    each record that it maps while a worker copies it."""

    def __init__(self, midway: Midway) -> None:
        self.cache: dict[Any, Any] = {"midway": midway, "tail": 0}

    async def map(self, element: int) -> int:
        midway = self.cache["midway"]
        if midway.copying.is_set():
            self.cache[element] = element
            midway.ran.set()
        return element


@repeated
def test_workers_copy_an_async_map_as_it_was_before_the_loop_ran_it(repeat: int) -> None:
    """Forced, as above: a worker's copy stops midway through the cache of an `async def` map
    until the event loop has mapped a record, which adds a key (the other worker reads the
    records meanwhile). The loop runs the loader's own object: the workers copy the pattern."""
    midway = Midway(threading.current_thread(), first_only=True)
    transform = AddsWhileCopiedOnTheLoop(midway)
    with iter(batched(transform, 2_000, 4)) as batches:
        assert sum(len(batch) for batch in batches) == 2_000
    assert midway.ran.is_set()
    assert len(transform.cache) > 2  # the loop ran records while a worker copied


def test_a_second_iterator_copies_the_firsts_pattern_not_the_running_operations() -> None:
    """Two iterators of one loader at once: the first runs the loader's own operations on its
    consumer's thread; the second copies the first's pattern, which nothing runs."""
    sources: list[int] = []

    class NamesItsSource(MapTransform):
        def __deepcopy__(self, memo: dict[int, Any]) -> NamesItsSource:
            sources.append(id(self))
            return NamesItsSource()

        def map(self, element: int) -> int:
            return element

    transform = NamesItsSource()
    loader = batched(transform, 64, 8)
    with iter(loader) as first:
        next(first)
        with iter(loader) as second:
            assert sum(len(batch) for batch in second) == 64
        assert sum(len(batch) for batch in first) == 56
    assert sources.count(id(transform)) == 1  # the first iterator's pattern, and nothing else


def test_operations_from_an_iterator_are_taken_as_a_list_as_grain_takes_them() -> None:
    def make(operations: Any) -> DataLoader:
        return DataLoader(
            data_source=RangeDataSource(0, 10),
            sampler=IndexSampler(10, num_epochs=1),
            operations=operations,
        )

    wanted = [b.tolist() for b in make([lambda x: x * 2, Batch(3)])]
    loader = make(op for op in [lambda x: x * 2, Batch(3)])
    assert [b.tolist() for b in loader] == wanted
    assert [b.tolist() for b in loader] == wanted  # the generator was read once, at construction
