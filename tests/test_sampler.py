"""Samplers: Grain's records for every argument combination, O(1) lookups, epochs, shards, RNG.

The comparisons use the real Grain 0.2.18 where it is installed (the 3.11
session) and skip, saying why, elsewhere.
"""

from __future__ import annotations

import re
import sys
import tracemalloc
from typing import Any

import numpy as np
import pytest

import aioloader
from aioloader import IndexSampler, NoSharding, RecordMetadata, SequentialSampler, ShardOptions
from aioloader._sampling.walk import Walk
from tests.grain_reference import grain_python

# Shards of every kind: none, one of one, 3 and 4 shards (a remainder or not), both remainders.
SHARDS = [
    None,
    (0, 1, False),
    (0, 3, False),
    (1, 3, False),
    (2, 3, False),
    (0, 3, True),
    (2, 3, True),
    (1, 4, False),
    (3, 4, True),
]
SIZES = [1, 101, 1000]  # shards of 0 to 1000 records
SHUFFLES = [(False, None), (False, 5), (True, 0), (True, 5), (True, 2**32 - 1)]
EPOCHS = [1, 3, None]


def shard_id(shard: tuple[int, int, bool] | None) -> str:
    return "none" if shard is None else f"{shard[0]}of{shard[1]}{'-drop' if shard[2] else ''}"


def make_shard(module: Any, shard: tuple[int, int, bool] | None) -> Any:
    """`NoSharding()` or `ShardOptions(...)` of `module` (aioloader or grain.python)."""
    return module.NoSharding() if shard is None else module.ShardOptions(*shard)


def first_draw(metadata: Any) -> int | None:
    return None if metadata.rng is None else int(metadata.rng.integers(0, 2**62))


def lookup(sampler: Any, index: int) -> tuple[Any, ...]:
    """What `sampler[index]` gives: (index, record_key, first draw), or the exception type."""
    try:
        metadata = sampler[index]
    except Exception as error:
        return (type(error),)
    return (metadata.index, metadata.record_key, first_draw(metadata))


def indices_to_compare(sampler: Any, num_records: int) -> list[int]:
    """Up to four epochs: the first indices, both sides of each of the shard's epoch boundaries,
    the last index, random ones, and the two just out of range (-1 and len)."""
    stop = min(len(sampler), 4 * num_records + 3)
    count, first = sampler.shard_options.shard_count, sampler.shard_options.shard_index
    epoch = count * max(1, getattr(sampler, "shard_length", num_records // count))
    edges = [e * epoch + first + d for e in range(1, 4) for d in (-count, 0, count)]
    chooser = np.random.default_rng(num_records)
    inside = {*range(min(stop, 16)), *edges, stop - 1, *chooser.integers(0, max(stop, 1), 12).tolist()}
    return [*sorted(i for i in inside if 0 <= i < stop), -1, len(sampler)]


def assert_equal_to_grains(ours: Any, theirs: Any, num_records: int) -> None:
    """The same metadata (index, key, generator) at every compared index, looked up one by one
    and in bulk; the same exception type where Grain raises one."""
    indices = indices_to_compare(ours, num_records)
    wanted = {i: lookup(theirs, i) for i in indices}
    for index in indices:
        if wanted[index] == (ZeroDivisionError,):  # Grain's lookup in a shard without records
            assert lookup(ours, index) == (IndexError,), index
        else:
            assert lookup(ours, index) == wanted[index], index
    inside = [i for i in indices if 0 <= i < len(theirs) and len(wanted[i]) == 3]
    if inside:
        bulk = ours.record_keys(0, max(inside) + 1)
        assert [bulk[i] for i in inside] == [wanted[i][1] for i in inside]
    assert len(ours) == len(theirs)


@pytest.mark.parametrize("num_epochs", EPOCHS, ids=lambda e: f"epochs{e}")
@pytest.mark.parametrize(("shuffle", "seed"), SHUFFLES, ids=lambda v: str(v))
@pytest.mark.parametrize("shard", SHARDS, ids=shard_id)
@pytest.mark.parametrize("num_records", SIZES, ids=lambda n: f"n{n}")
def test_index_sampler_equals_grains(
    num_records: int, shard: Any, shuffle: bool, seed: int | None, num_epochs: int | None
) -> None:
    gp = grain_python()
    ours = IndexSampler(num_records, make_shard(aioloader, shard), shuffle, num_epochs, seed)
    theirs = gp.IndexSampler(num_records, make_shard(gp, shard), shuffle, num_epochs, seed)
    assert_equal_to_grains(ours, theirs, num_records)


@pytest.mark.parametrize("seed", [None, 3])
@pytest.mark.parametrize("shard", SHARDS, ids=shard_id)
@pytest.mark.parametrize("num_records", SIZES, ids=lambda n: f"n{n}")
def test_sequential_sampler_equals_grains(num_records: int, shard: Any, seed: int | None) -> None:
    gp = grain_python()
    ours = SequentialSampler(num_records, make_shard(aioloader, shard), seed)
    theirs = gp.SequentialSampler(num_records, make_shard(gp, shard), seed)
    assert_equal_to_grains(ours, theirs, num_records)


@pytest.mark.parametrize("num_records", [20_000, 70_001])  # above the 16-bit block: index_shuffle walks
def test_large_shuffled_shards_equal_grains(num_records: int) -> None:
    gp = grain_python()
    for shard in [None, (1, 3, False)]:
        ours = IndexSampler(num_records, make_shard(aioloader, shard), True, 2, 9)
        theirs = gp.IndexSampler(num_records, make_shard(gp, shard), True, 2, 9)
        sample = np.random.default_rng(1).integers(0, 2 * num_records, 300).tolist()
        assert ours.record_keys(0, 500) == [theirs[i].record_key for i in range(500)]
        assert [ours[i].record_key for i in sample] == [theirs[i].record_key for i in sample]


def test_iterating_the_guides_sampler_gives_grains_metadata() -> None:
    """The guide prints `for record_metadata in index_sampler`: iteration stops at IndexError."""
    gp = grain_python()
    ours = IndexSampler(5, ShardOptions(0, 1, drop_remainder=True), shuffle=True, num_epochs=2, seed=0)
    theirs = gp.IndexSampler(
        5, gp.ShardOptions(0, 1, drop_remainder=True), shuffle=True, num_epochs=2, seed=0
    )
    assert [lookup(ours, m.index) for m in ours] == [lookup(theirs, m.index) for m in theirs]
    assert [str(m) for m in ours] == [str(m) for m in theirs]


def test_reprs_equal_grains() -> None:
    gp = grain_python()
    pairs = [
        (NoSharding(), gp.NoSharding()),
        (ShardOptions(1, 3), gp.ShardOptions(1, 3)),
        (ShardOptions(2, 4, True), gp.ShardOptions(2, 4, True)),
        (IndexSampler(10), gp.IndexSampler(10)),
        (
            IndexSampler(10, ShardOptions(1, 3), True, 2, 5),
            gp.IndexSampler(10, gp.ShardOptions(1, 3), True, 2, 5),
        ),
        (SequentialSampler(7, ShardOptions(0, 2), 4), gp.SequentialSampler(7, gp.ShardOptions(0, 2), 4)),
        (RecordMetadata(3), gp.RecordMetadata(3)),
        (IndexSampler(10)[4], gp.IndexSampler(10)[4]),
    ]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)
        assert str(ours) == str(theirs)
    with_rng, grains = IndexSampler(10, seed=1)[2], gp.IndexSampler(10, seed=1)[2]
    assert without_address(repr(with_rng)) == without_address(repr(grains))
    assert str(with_rng) == str(grains) == "RecordMetadata(index=2, record_key=2, rng=Generator(Philox))"


def without_address(text: str) -> str:
    return re.sub(r" at 0x[0-9A-Fa-f]+", " at 0x?", text)


BAD_ARGUMENTS = [
    ({"num_records": 0}, ValueError, "num_records"),
    ({"num_records": -1}, ValueError, "num_records"),
    ({"num_records": 10, "num_epochs": 0}, ValueError, "num_epochs"),
    ({"num_records": 10, "shuffle": True}, ValueError, "seed"),
    ({"num_records": 10, "shuffle": True, "seed": "7"}, TypeError, "seed"),
    ({"num_records": 10, "shuffle": True, "seed": 1.5}, TypeError, "seed"),
    ({"num_records": 10, "seed": -3}, ValueError, r"`seed` must be a non-negative 32-bit int.*got -3"),
    ({"num_records": 10, "seed": 2**32}, ValueError, r"got 4294967296"),
    ({"num_records": 10, "shuffle": True, "seed": 2**40}, ValueError, "seed"),
]
BAD_IDS = [
    "zero",
    "negative",
    "zero-epochs",
    "shuffle-no-seed",
    "str-seed",
    "float-seed",
    "negative-seed",
    "33-bits",
    "40-bits",
]


@pytest.mark.parametrize(("kwargs", "error", "names"), BAD_ARGUMENTS, ids=BAD_IDS)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type, names: str) -> None:
    with pytest.raises(error, match=names):
        IndexSampler(**kwargs)


@pytest.mark.parametrize(("kwargs", "error", "names"), BAD_ARGUMENTS, ids=BAD_IDS)
def test_bad_arguments_raise_grains_exception_types(kwargs: dict[str, Any], error: type, names: str) -> None:
    gp = grain_python()
    with pytest.raises((TypeError, ValueError)) as grains:
        gp.IndexSampler(**kwargs)
    assert issubclass(error, grains.type)


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"num_records": 1.5}, TypeError, "num_records"),
        ({"num_records": 10, "shuffle": "yes"}, TypeError, "shuffle"),
        ({"num_records": 10, "shard_options": (0, 2)}, TypeError, "shard_options"),
    ],
    ids=["float-records", "shuffle-str", "shard-tuple"],
)
def test_arguments_of_the_wrong_type_are_named(kwargs: dict[str, Any], error: type, names: str) -> None:
    with pytest.raises(error, match=names):
        IndexSampler(**kwargs)


def test_grains_defaults() -> None:
    sampler = IndexSampler(4)
    assert (sampler.shard_options, sampler.shuffle, sampler.num_epochs, sampler.seed) == (
        NoSharding(),
        False,
        None,
        None,
    )
    assert len(sampler) == sys.maxsize  # forever, as Grain says it
    assert [sampler[i].record_key for i in range(9)] == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert sampler[5].rng is None  # no seed, no generator
    assert SequentialSampler(3).seed is None
    assert SequentialSampler(3)[1].rng is None


@pytest.mark.parametrize(
    "sampler", [IndexSampler(5, num_epochs=2), SequentialSampler(5)], ids=["index", "seq"]
)
def test_out_of_range_indices_raise_index_error(sampler: Any) -> None:
    for index in (-1, -len(sampler), len(sampler), len(sampler) + 100):
        with pytest.raises(IndexError, match=f"got {index}"):
            sampler[index]


def test_an_infinite_sampler_rejects_only_negative_indices() -> None:
    sampler = IndexSampler(3, shuffle=True, seed=1)
    assert sampler[10**12].index == 10**12
    with pytest.raises(IndexError):
        sampler[-1]


def test_shuffled_epochs_are_different_permutations_of_the_whole_shard() -> None:
    sampler = IndexSampler(1000, shuffle=True, num_epochs=3, seed=7)
    epochs = np.array(sampler.record_keys(0, 3000)).reshape(3, 1000)
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(1000))
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])


def test_lookup_matches_chunked_computation_across_epoch_boundaries() -> None:
    sampler = IndexSampler(37, shuffle=True, num_epochs=None, seed=3)
    chunked = [key for s in range(0, 200, 10) for key in sampler.record_keys(s, s + 10)]
    assert chunked == [sampler[i].record_key for i in range(200)]


@pytest.mark.parametrize("shard", SHARDS, ids=shard_id)
@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("num_records", [7, 1000, 17_000])
def test_the_walks_keys_equal_the_keys_of_each_index(
    shard: tuple[int, int, bool] | None, shuffle: bool, num_records: int
) -> None:
    """A shard's walk (`step` = the shard count) takes a path of its own, from kept blocks of
    the permutation; across epochs, blocks and chunk sizes it gives what each index gives."""
    options = make_shard(aioloader, shard)
    sampler = IndexSampler(num_records, options, shuffle=shuffle, num_epochs=None, seed=11)
    step, first = options.shard_count, options.shard_index
    length = sampler.shard_length
    # Chunks that start an epoch, cross one or two, end one, cross a kept block (8,192 positions).
    chunks = [
        (0, 1),
        (0, 2 * length + 3),
        (length - 1, 2),
        (8190, 5),
        (3 * length - 2, min(9000, 5 * length)),
    ]
    for start, count in chunks:
        walked = sampler.record_keys(first + start * step, first + (start + count) * step, step)
        indices = np.arange(first + start * step, first + (start + count) * step, step)
        assert walked == sampler.keys_at(indices), (start, count)


def test_a_billion_records_cost_no_memory_per_lookup() -> None:
    sampler = IndexSampler(10**9, shuffle=True, num_epochs=None, seed=1)
    far = 5 * 10**9 + 123
    tracemalloc.start()
    try:
        meta = sampler[far]
        keys = sampler.record_keys(far, far + 1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The cipher's round-function table (128 KiB) and arrays of 1,000 ints: nothing the size
    # of the dataset (a stored permutation would take 8 GB).
    assert peak < 2_000_000
    assert 0 <= meta.record_key < 10**9
    assert meta.index == far
    assert len(set(keys)) == 1000  # a permutation never repeats within an epoch


@pytest.mark.parametrize("count", [1, 2, 3, 7, 8])
@pytest.mark.parametrize("num_records", [1, 5, 8, 101])
def test_each_shard_owns_a_slice_and_the_slices_cover_every_record(count: int, num_records: int) -> None:
    keys = []
    for i in range(count):
        shard = IndexSampler(num_records, ShardOptions(i, count), shuffle=True, num_epochs=1, seed=4)
        keys += shard.record_keys(i, i + count * shard.shard_length, count)  # one epoch of this shard
    assert sorted(keys) == list(range(num_records))


@pytest.mark.parametrize("count", [2, 3, 7])
def test_drop_remainder_gives_every_loader_the_same_whole_epochs(count: int) -> None:
    walks = [Walk(IndexSampler(101, ShardOptions(i, count, True), num_epochs=2)) for i in range(count)]
    assert {walk.length for walk in walks} == {2 * (101 // count)}


def test_shuffle_stays_within_the_shard() -> None:
    shard = IndexSampler(100, ShardOptions(1, 4), shuffle=True, num_epochs=2, seed=5)
    assert set(shard.record_keys(1, 200, 4)) == set(range(25, 50))


def test_rng_is_philox_keyed_on_seed_plus_the_global_index_and_made_lazily() -> None:
    sampler = IndexSampler(10, ShardOptions(1, 2), seed=42, num_epochs=1)
    meta = sampler[3]
    assert meta._rng is None  # not made until asked for
    expected = np.random.Generator(np.random.Philox(key=42 + 3)).integers(0, 2**31, 5)
    assert meta.rng is not None
    assert np.array_equal(meta.rng.integers(0, 2**31, 5), expected)
    third, fourth = sampler[3].rng, sampler[4].rng
    assert third is not None
    assert fourth is not None
    assert third.integers(0, 2**62) != fourth.integers(0, 2**62)  # never shared between records


def test_no_two_shards_share_a_generator() -> None:
    """Each shard's records have their own global indices, hence their own generators."""
    draws = []
    for i in range(4):
        sampler = IndexSampler(30, ShardOptions(i, 4), shuffle=True, num_epochs=2, seed=8)
        walk = Walk(sampler)
        draws += [first_draw(sampler[g]) for g in walk.indices(0, walk.length or 0)]
    assert len(draws) == 4 * (60 // 4)
    assert len(set(draws)) == len(draws)


def test_record_metadata_public_constructor() -> None:
    rng = np.random.default_rng(0)
    meta = RecordMetadata(index=1, record_key=2, rng=rng)
    assert (meta.index, meta.record_key, meta.rng) == (1, 2, rng)
    assert meta == RecordMetadata(1, 2)
    assert (RecordMetadata(4).record_key, RecordMetadata(4).rng) == (None, None)


@pytest.mark.parametrize(
    ("index", "count", "message"),
    [(2, 2, "shard_index"), (-1, 2, "shard_index"), (0, 0, "shard_count")],
)
def test_bad_shard_options_are_named(index: int, count: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShardOptions(index, count)


def test_no_sharding_is_one_shard() -> None:
    assert NoSharding().bounds(10) == (0, 10)
