"""`MapDataset`: what each transformation gives, on every build (Grain's own results are
compared in test_map_dataset_grain.py, where Grain is installed)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader import DatasetIterator, MapDataset
from tests.conftest import repeated


def elements(ds: MapDataset[Any], count: int | None = None) -> list[Any]:
    """`ds[i]` for the first `count` indices (one epoch by default), holes included."""
    return [ds[i] for i in range(len(ds) if count is None else count)]


# Sources.


def test_range_is_pythons_range_epoch_after_epoch() -> None:
    for args in [(5,), (2, 10), (2, 10, 3), (10, 2, -3), (3, 3)]:
        assert list(MapDataset.range(*args)) == list(range(*args)), args
    ds = MapDataset.range(2, 10, 3)
    assert len(ds) == 3
    assert elements(ds, 7) == [2, 5, 8, 2, 5, 8, 2]


def test_source_reads_a_sequence_and_a_data_source() -> None:
    assert list(MapDataset.source(["a", "b", "c"])) == ["a", "b", "c"]
    ds = MapDataset.source(al.RangeDataSource(10, 20, 2))
    assert elements(ds, 7) == [10, 12, 14, 16, 18, 10, 12]


def test_source_reads_a_batch_with_getitems_once() -> None:
    class Batched:
        def __init__(self) -> None:
            self.calls: list[list[int]] = []

        def __len__(self) -> int:
            return 4

        def __getitem__(self, key: int) -> int:
            raise AssertionError("a batch read must not fall back to one key at a time")

        def __getitems__(self, keys: list[int]) -> list[int]:
            self.calls.append(list(keys))
            return [k * 10 for k in keys]

    source = Batched()
    assert MapDataset.source(source).map(lambda x: x + 1)._getitems([0, 5, 3]) == [1, 11, 31]
    assert source.calls == [[0, 1, 3]]


def test_a_source_whose_getitems_loses_records_is_an_error() -> None:
    class Lossy:
        def __len__(self) -> int:
            return 4

        def __getitem__(self, key: int) -> int:
            return key

        def __getitems__(self, keys: list[int]) -> list[int]:
            return list(keys)[:-1]

    with pytest.raises(ValueError, match=r"returned 2 records for 3 keys \(Lossy\)"):
        MapDataset.source(Lossy())._getitems([0, 1, 2])


def test_a_source_shorter_than_its_len_raises_instead_of_inventing_records() -> None:
    class Liar:
        def __len__(self) -> int:
            return 10

        def __getitem__(self, key: int) -> int:
            if key >= 7:
                raise IndexError(f"no record {key}")
            return key

    with pytest.raises(IndexError, match="no record 7"):
        list(MapDataset.source(Liar()))


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: MapDataset.source(42), TypeError, r"`source` must define __len__ and __getitem__"),
        (lambda: MapDataset.source("abc"), TypeError, r"`source` must define"),
        (lambda: MapDataset.range(1.5), TypeError, r"`start` must be an int, got 1.5"),
        (lambda: MapDataset.range(0, 5, 0), ValueError, r"`step` must not be zero, got 0"),
        (lambda: MapDataset.range(0, "9"), TypeError, r"`stop` must be an int"),
    ],
    ids=["not-indexable", "str", "float-start", "zero-step", "str-stop"],
)
def test_bad_sources_are_refused_by_name(make: Callable[[], Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make()


def test_index_must_be_an_int_and_the_dataset_not_empty() -> None:
    ds = MapDataset.range(3)
    assert ds[np.int64(4)] == 1
    # Any int wraps as in Grain (`index % len`, through each dataset's own arithmetic): -1 is
    # the last element; a shuffle's -1 belongs to its epoch -1 (checked against Grain in
    # test_map_dataset_grain).
    assert [ds[-1], ds[-3], ds[-4]] == [2, 0, 2]
    assert MapDataset.range(10)[2:8][-2] == 6
    with pytest.raises(TypeError, match=r"`index` must be an int or a slice, got 1.0 of type float"):
        ds[1.0]  # type: ignore[call-overload]
    with pytest.raises(IndexError, match=r"`index` 0 is out of range: the dataset is empty"):
        MapDataset.range(0)[0]


# Slices and epochs.


@pytest.mark.parametrize(
    "sl",
    [
        slice(None),
        slice(2, 7),
        slice(1, None, 3),
        slice(None, None, -1),
        slice(8, 1, -2),
        slice(-4, None),
        slice(20, 30),
        slice(None, 100),
    ],
    ids=str,
)
def test_slices_pick_what_python_picks(sl: slice) -> None:
    ds = MapDataset.range(10).map(lambda x: x * 10)
    assert list(ds[sl]) == [x * 10 for x in range(10)][sl]
    assert list(ds.slice(sl)) == list(ds[sl])


def test_a_slice_reads_the_same_positions_in_later_epochs() -> None:
    ds = MapDataset.range(10)[2:8:3]  # 2, 5
    assert elements(ds, 5) == [2, 5, 2, 5, 2]
    assert elements(ds[1:], 3) == [5, 5, 5]


def test_bad_slices_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"`sl` must be a slice of ints with a non-zero step"):
        MapDataset.range(5)[::0]
    with pytest.raises(ValueError, match=r"`sl` must be a slice"):  # Grain's type
        MapDataset.range(5).slice(3)  # type: ignore[arg-type]


def test_repeat_changes_the_length_and_reseeds_random_transforms_each_epoch() -> None:
    base = MapDataset.range(4).random_map(lambda x, rng: (x, int(rng.integers(1 << 30))), seed=3)
    twice = base.repeat(2)
    assert len(twice) == 8
    assert [x for x, _ in twice] == [0, 1, 2, 3] * 2
    draws = [d for _, d in twice]
    assert draws[:4] != draws[4:]
    same = base.repeat(2, reseed_each_epoch=False)
    assert [d for _, d in same] == draws[:4] * 2
    forever = MapDataset.range(4).repeat()
    assert len(forever) == sys.maxsize
    assert forever[4 * 10**12 + 3] == 3
    assert len(MapDataset.range(0).repeat()) == 0


@pytest.mark.parametrize(
    ("num_epochs", "error", "match"),
    [
        (0, ValueError, r"`num_epochs` must be greater than or equal to 1, got 0"),
        (-2, ValueError, r"`num_epochs` must be greater than or equal to 1, got -2"),
        (1.5, TypeError, r"`num_epochs` must be an int, got 1.5"),
        (True, TypeError, r"`num_epochs` must be an int, got True"),
        (sys.maxsize, ValueError, r"`num_epochs` \d+ times len\(parent\) 4 reaches sys.maxsize"),
    ],
    ids=["zero", "negative", "float", "bool", "overflow"],
)
def test_bad_repeats_are_refused_by_name(num_epochs: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        MapDataset.range(4).repeat(num_epochs)


def test_an_endless_dataset_cannot_be_repeated_or_concatenated() -> None:
    forever = MapDataset.range(3).repeat()
    with pytest.raises(ValueError, match="already repeats forever"):
        forever.repeat(2)
    with pytest.raises(ValueError, match=r"`datasets` must be finite to concatenate; datasets \[1\]"):
        MapDataset.concatenate([MapDataset.range(2), forever])


# Shuffle.


@pytest.mark.parametrize("size", [1, 2, 5, 1000, 17_000])
def test_shuffle_permutes_every_epoch_differently(size: int) -> None:
    ds = MapDataset.range(size).shuffle(seed=4)
    epochs = [ds._getitems(list(range(e * size, (e + 1) * size))) for e in range(3)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(size))
    if size >= 5:
        assert epochs[0] != epochs[1] != epochs[2]
        assert epochs[0] != list(range(size))
    spanning = list(range(size - 3, size + 3)) if size > 3 else [0, size]
    assert ds._getitems(spanning) == [ds[i] for i in spanning]


def test_shuffle_needs_a_seed_below_2_to_the_32() -> None:
    with pytest.raises(ValueError, match=r"`shuffle` requires a seed"):
        MapDataset.range(3).shuffle()
    with pytest.raises(ValueError, match=r"`seed` must be less than 2\*\*32 for `shuffle`, got 4294967296"):
        MapDataset.range(3).shuffle(seed=2**32)
    assert list(MapDataset.range(3).seed(2**40).shuffle()) != []  # a derived seed always fits


# Map, random map, filter.


def test_map_and_filter_leave_holes_that_iteration_skips() -> None:
    calls: list[int] = []

    def double(x: int) -> int:
        calls.append(x)
        return 2 * x

    ds = MapDataset.range(6).filter(lambda x: x % 3 != 1).map(double)
    assert len(ds) == 6
    assert elements(ds) == [0, None, 4, 6, None, 10]
    assert calls == [0, 2, 3, 5]  # never called on a hole
    assert list(ds) == [0, 4, 6, 10]


class Square(al.MapTransform):
    def map(self, element: int) -> int:
        return element * element


class Odd(al.FilterTransform):
    def filter(self, element: int) -> bool:
        return element % 2 == 1


class Jitter(al.RandomMapTransform):
    def random_map(self, element: int, rng: np.random.Generator) -> float:
        return element + float(rng.random())


def test_aioloaders_transform_objects_are_accepted() -> None:
    ds = MapDataset.range(6).map(Square()).filter(Odd()).random_map(Jitter(), seed=1)
    values = list(ds)
    assert [int(v) for v in values] == [1, 9, 25]
    assert all(0 < v - int(v) < 1 for v in values)


@pytest.mark.parametrize(
    ("apply", "match"),
    [
        (lambda ds: ds.map(Odd()), r"`transform` of `map` must be a MapTransform .* got <.*Odd"),
        (lambda ds: ds.filter(3), r"`transform` of `filter` must be a FilterTransform .* got 3"),
        (
            lambda ds: ds.random_map(Square(), seed=0),
            r"`transform` of `random_map` must be a RandomMapTransform",
        ),
    ],
    ids=["filter-as-map", "int-as-filter", "map-as-random-map"],
)
def test_a_transform_of_the_wrong_kind_is_refused_by_name(apply: Callable[[Any], Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        apply(MapDataset.range(3))


def test_random_map_draws_depend_only_on_the_seed_and_the_index() -> None:
    ds = MapDataset.range(50).random_map(lambda x, rng: rng.integers(1 << 62, size=3), seed=11)
    forward = [ds[i] for i in range(50)]
    backward = [ds[i] for i in reversed(range(50))][::-1]
    batched = ds._getitems(list(range(50)))
    for a, b, c in zip(forward, backward, batched, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert len({tuple(x) for x in forward}) == 50
    other = MapDataset.range(50).random_map(lambda x, rng: rng.integers(1 << 62, size=3), seed=12)
    assert not np.array_equal(other[0], forward[0])


def test_random_map_gives_each_call_its_own_generator() -> None:
    kept: list[np.random.Generator] = []

    def keep(x: int, rng: np.random.Generator) -> int:
        kept.append(rng)
        return int(rng.integers(1000))

    ds = MapDataset.range(3).random_map(keep, seed=0)
    first = ds[1]
    kept[0].random(100)  # the user abuses the generator after the call ...
    assert ds[1] == first  # ... and the next call is not affected
    assert kept[0] is not kept[1]


def test_random_transforms_need_a_seed() -> None:
    with pytest.raises(ValueError, match=r"`random_map` requires a seed: pass `seed=` or call `ds.seed"):
        MapDataset.range(3).random_map(lambda x, rng: x)
    with pytest.raises(ValueError, match=r"`seed` must be greater than or equal to 0, got -1"):
        MapDataset.range(3).random_map(lambda x, rng: x, seed=-1)
    with pytest.raises(TypeError, match=r"`seed` must be an int, got '7'"):
        MapDataset.range(3).seed("7")  # type: ignore[arg-type]


def test_seed_gives_each_random_transform_downstream_its_own_seed() -> None:
    def draw(x: int, rng: np.random.Generator) -> int:
        return int(rng.integers(1 << 62))

    seeded = MapDataset.range(4).seed(42)
    one = seeded.random_map(draw)
    two = one.map(lambda x: x).random_map(draw)
    assert one[0] == seeded.random_map(draw)[0]  # the same place in the pipeline: the same seed
    assert two[0] != one[0]
    assert MapDataset.range(4).seed(43).random_map(draw)[0] != one[0]
    explicit = seeded.random_map(draw, seed=5)
    assert explicit[0] == MapDataset.range(4).random_map(draw, seed=5)[0]


# Batches.


def test_batches_stack_leaves_and_never_span_epochs() -> None:
    ds = MapDataset.range(5).map(lambda x: {"x": np.full(2, x), "y": (x, float(x))}).batch(2)
    assert len(ds) == 3
    last = ds[2]
    np.testing.assert_array_equal(last["x"], [[4, 4]])
    np.testing.assert_array_equal(last["y"][0], [4])
    np.testing.assert_array_equal(ds[3]["x"], [[0, 0], [1, 1]])  # the next epoch starts afresh
    dropped = MapDataset.range(5).batch(2, drop_remainder=True)
    assert [b.tolist() for b in dropped] == [[0, 1], [2, 3]]
    assert dropped[2].tolist() == [0, 1]
    assert MapDataset.range(5).batch(2, batch_fn=sum)[1] == 5


def test_batching_after_a_filter_is_refused() -> None:
    with pytest.raises(ValueError, match=r"`MapDataset\.batch` can not follow `MapDataset\.filter`"):
        MapDataset.range(5).filter(lambda x: x > 1).map(lambda x: x).batch(2)


def test_a_batch_of_elements_that_do_not_stack_names_the_batch() -> None:
    ds = MapDataset.range(4).map(lambda x: np.zeros(x)).batch(2)
    with pytest.raises(ValueError, match="different shapes") as caught:
        ds[1]
    assert "batch(2) failed on the element at index 1" in "\n".join(caught.value.__notes__)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, r"`batch_size` must be greater than or equal to 1, got 0"),
        ({"batch_size": 2.0}, TypeError, r"`batch_size` must be an int, got 2.0"),
        ({"batch_size": 2, "drop_remainder": 1}, TypeError, r"`drop_remainder` must be a bool, got 1"),
        ({"batch_size": 2, "batch_fn": "sum"}, TypeError, r"`batch_fn` must be callable or None, got 'sum'"),
    ],
    ids=["zero", "float", "int-flag", "str-fn"],
)
def test_bad_batches_are_refused_by_name(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        MapDataset.range(4).batch(**kwargs)


# Mixing and concatenation.


def test_mix_interleaves_by_weight_as_long_as_the_shortest_allows() -> None:
    a, b = MapDataset.range(5), MapDataset.range(100, 103)
    assert list(MapDataset.mix([a, b])) == [0, 100, 1, 101, 2, 102]
    mixed = MapDataset.mix([MapDataset.range(100), MapDataset.range(1000, 1100)], [3, 1])
    assert len(mixed) == 133
    taken = [x for x in mixed]
    assert sum(x < 1000 for x in taken) == 100
    assert sum(x >= 1000 for x in taken) == 33
    assert all(taken.count(x) == 1 for x in taken)  # no element twice within the length


def test_mix_reads_each_input_in_one_batch() -> None:
    ds = MapDataset.mix([MapDataset.range(10), MapDataset.range(50, 60).map(lambda x: -x)], [1, 2])
    indices = [7, 0, 3, 3, 12]
    assert ds._getitems(indices) == [ds[i] for i in indices]


def test_concatenate_lays_inputs_end_to_end_epoch_by_epoch() -> None:
    ds = MapDataset.concatenate([MapDataset.range(3), MapDataset.range(0), MapDataset.range(10, 12)])
    assert list(ds) == [0, 1, 2, 10, 11]
    shuffled_epochs = MapDataset.concatenate([MapDataset.range(2).random_map(lambda x, r: x, seed=0)])
    assert elements(shuffled_epochs, 4) == [0, 1, 0, 1]
    assert len(MapDataset.concatenate([MapDataset.range(0)])) == 0


@pytest.mark.parametrize(
    ("datasets", "weights", "error", "match"),
    [
        ([], None, ValueError, r"`datasets` must hold at least one MapDataset"),
        ("ab", None, TypeError, r"`datasets` must be a list or tuple of MapDatasets, got str"),
        (
            [MapDataset.range(2), [1, 2]],
            None,
            TypeError,
            r"`datasets` must hold only MapDatasets; datasets \[1\]",
        ),
        (
            [MapDataset.range(2)] * 2,
            [1.0],
            ValueError,
            r"`weights` must have one weight per dataset \(2\), got 1",
        ),
        ([MapDataset.range(2)] * 2, [1, 0], ValueError, r"`weights` must be finite numbers greater than 0"),
        ([MapDataset.range(2)] * 2, [1, -1], ValueError, r"`weights` must be finite numbers greater than 0"),
        ([MapDataset.range(2)] * 2, [1, float("nan")], ValueError, r"`weights` must be finite numbers"),
        ([MapDataset.range(2)] * 2, [True, 1], ValueError, r"`weights` must be finite numbers"),
        ([MapDataset.range(2)] * 2, [1, 5e-324], ValueError, r"`weights` must not span more than a float"),
        (
            [MapDataset.range(2), MapDataset.range(0)],
            None,
            ValueError,
            r"must have positive length for mixing, but dataset\(s\) at "
            r"index 1 \(MapDataset\.range\(0, 0, 1\)\) have length 0\.",
        ),
    ],
    ids=["none", "str", "not-a-dataset", "count", "zero", "negative", "nan", "bool", "span", "empty-input"],
)
def test_bad_mixes_are_refused_by_name(datasets: Any, weights: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        MapDataset.mix(datasets, weights)


# Errors from the user's code.


def test_an_error_in_a_transform_keeps_its_type_and_names_the_element() -> None:
    def fragile(x: int) -> int:
        if x == 3:
            raise KeyError("bad record")
        return x

    ds = MapDataset.range(5).map(fragile)
    with pytest.raises(KeyError, match="bad record") as caught:
        list(ds)
    assert (
        "map(test_an_error_in_a_transform_keeps_its_type_and_names_the_element.<locals>.fragile) failed on "
        "the element at index 3" in "\n".join(caught.value.__notes__)
    )


def test_stop_iteration_in_a_transform_does_not_end_the_iteration_quietly() -> None:
    def stop(x: int) -> int:
        if x == 2:
            raise StopIteration
        return x

    with pytest.raises(RuntimeError, match="raised StopIteration"):
        list(MapDataset.range(5).map(stop))


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit], ids=lambda e: e.__name__)
def test_interrupts_in_a_transform_pass_through_untouched(interrupt: type[BaseException]) -> None:
    def stop(x: int, rng: np.random.Generator) -> int:
        raise interrupt

    with pytest.raises(interrupt) as caught:
        MapDataset.range(5).random_map(stop, seed=0)[1]
    assert not getattr(caught.value, "__notes__", [])


def test_a_filter_whose_answer_has_no_truth_value_raises() -> None:
    ds = MapDataset.range(3).map(lambda x: np.arange(3)).filter(lambda x: x > 0)
    with pytest.raises(ValueError, match="truth value") as caught:
        ds[0]
    assert any("filter(" in note for note in caught.value.__notes__)


# Threads.


def pipeline() -> MapDataset[Any]:
    left = MapDataset.range(300).seed(7).random_map(lambda x, rng: (x, int(rng.integers(1 << 40))))
    right = MapDataset.source([f"r{i}" for i in range(100)]).map(lambda s: (s, len(s)))
    return MapDataset.mix([left, right.repeat(3)], [2, 1]).filter(lambda t: not str(t[0]).endswith("3"))


@repeated
def test_many_threads_reading_at_once_get_what_one_thread_gets(repeat: int) -> None:
    ds = pipeline()
    expected = elements(ds)
    results: dict[int, list[Any]] = {}
    start = threading.Barrier(8)

    def read(worker: int) -> None:
        start.wait()
        order = list(range(len(ds)))[worker::8]
        results[worker] = ds._getitems(order) if worker % 2 else [ds[i] for i in order]

    threads = [threading.Thread(target=read, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    merged: list[Any] = [None] * len(ds)
    for worker, values in results.items():
        merged[worker::8] = values
    assert merged == expected


def test_iterating_a_map_dataset_checkpoints_as_grains_does() -> None:
    # Grain's `iter(MapDataset)` is `iter(ds.to_iter_dataset())`: its iterator has a state.
    dataset = MapDataset.range(6).map(lambda x: x * 10).filter(lambda x: x != 20)
    iterator = iter(dataset)
    assert isinstance(iterator, DatasetIterator)
    assert [next(iterator), next(iterator)] == [0, 10]
    resumed = iter(dataset)
    resumed.set_state(iterator.get_state())
    assert list(resumed) == [30, 40, 50] == list(iterator)
