"""Samplers: stateless O(1) lookups, real permutations, epochs, sharding and per-record RNG."""

from __future__ import annotations

import numpy as np
import pytest

from aioloader import IndexSampler, NoSharding, RecordMetadata, SequentialSampler, ShardOptions
from aioloader._sampling.permutation import Permutation


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 65, 1000, 4097, 100_003])
@pytest.mark.parametrize("key", [0, 1, 2**63 + 5])
def test_permutation_is_a_bijection(size: int, key: int) -> None:
    images = Permutation(size, key)(np.arange(size))
    assert np.array_equal(np.sort(images), np.arange(size))


@pytest.mark.parametrize("size", [1, 5, 97, 1000, 65_537])
def test_the_vectorised_and_the_scalar_permutation_agree(size: int) -> None:
    permutation = Permutation(size, 99)
    positions = np.arange(size)
    assert permutation(positions).tolist() == [permutation.one(p) for p in range(size)]


def test_permutation_depends_on_the_key_and_shuffles() -> None:
    a = Permutation(10_000, 1)(np.arange(10_000))
    b = Permutation(10_000, 2)(np.arange(10_000))
    assert not np.array_equal(a, b)
    # A shuffle leaves few records in place and moves neighbours far apart.
    assert np.mean(a == np.arange(10_000)) < 0.01
    assert np.median(np.abs(np.diff(a))) > 100


def test_shuffled_epochs_are_different_permutations_of_the_whole_shard() -> None:
    sampler = IndexSampler(1000, shuffle=True, num_epochs=3, seed=7)
    keys = np.array(sampler.record_keys(0, 3000))
    epochs = keys.reshape(3, 1000)
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(1000))
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])


def test_lookup_matches_chunked_computation_across_epoch_boundaries() -> None:
    sampler = IndexSampler(37, shuffle=True, num_epochs=None, seed=3)
    chunked = [key for s in range(0, 200, 10) for key in sampler.record_keys(s, s + 10)]
    single = [sampler[i].record_key for i in range(200)]
    assert chunked == single


def test_a_billion_records_cost_no_memory_per_lookup() -> None:
    sampler = IndexSampler(10**9, shuffle=True, num_epochs=None, seed=1)
    far = 5 * 10**9 + 123
    meta = sampler[far]
    assert 0 <= meta.record_key < 10**9
    assert meta.index == far
    keys = sampler.record_keys(far, far + 1000)
    assert len(set(keys)) == 1000  # a permutation never repeats within an epoch


def test_sequential_sampler_is_in_order_and_finite() -> None:
    sampler = SequentialSampler(5)
    assert [sampler[i].record_key for i in range(len(sampler))] == [0, 1, 2, 3, 4]
    with pytest.raises(IndexError):
        sampler[5]


def test_infinite_sampler_has_no_len() -> None:
    sampler = IndexSampler(3, num_epochs=None)
    assert sampler.length is None
    with pytest.raises(TypeError, match="infinite"):
        len(sampler)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 8])
@pytest.mark.parametrize("num_records", [0, 1, 5, 8, 101])
def test_shards_are_disjoint_and_cover_every_record(count: int, num_records: int) -> None:
    shards = [IndexSampler(num_records, ShardOptions(i, count)) for i in range(count)]
    flat = [key for shard in shards for key in shard.record_keys(0, len(shard))]
    assert sorted(flat) == list(range(num_records))
    assert len(set(flat)) == len(flat)


@pytest.mark.parametrize("count", [2, 3, 7])
def test_drop_remainder_gives_equal_shards(count: int) -> None:
    lengths = {len(IndexSampler(101, ShardOptions(i, count, drop_remainder=True))) for i in range(count)}
    assert lengths == {101 // count}


def test_shuffle_stays_within_the_shard() -> None:
    shard = IndexSampler(100, ShardOptions(1, 4), shuffle=True, num_epochs=2, seed=5)
    keys = shard.record_keys(0, len(shard))
    assert set(keys) == set(range(25, 50))


def test_rng_is_philox_keyed_on_seed_plus_index_and_made_lazily() -> None:
    sampler = IndexSampler(10, seed=42)
    meta = sampler[3]
    assert meta._rng is None  # not made until asked for
    expected = np.random.Generator(np.random.Philox(key=42 + 3)).integers(0, 2**31, 5)
    assert meta.rng is not None
    assert np.array_equal(meta.rng.integers(0, 2**31, 5), expected)
    assert sampler[3].rng is not meta.rng  # never shared between records


def test_record_metadata_public_constructor() -> None:
    rng = np.random.default_rng(0)
    meta = RecordMetadata(index=1, record_key=2, rng=rng)
    assert (meta.index, meta.record_key, meta.rng) == (1, 2, rng)
    assert meta == RecordMetadata(1, 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"num_records": -1}, ValueError, "num_records"),
        ({"num_records": 1.5}, TypeError, "num_records"),
        ({"num_records": 10, "num_epochs": 0}, ValueError, "num_epochs"),
        ({"num_records": 10, "seed": -3}, ValueError, "seed"),
        ({"num_records": 10, "shuffle": "yes"}, TypeError, "shuffle"),
        ({"num_records": 10, "shard_options": (0, 2)}, TypeError, "shard_options"),
        ({"num_records": 0, "num_epochs": None}, ValueError, "num_epochs=None"),
    ],
    ids=[
        "negative-records",
        "float-records",
        "zero-epochs",
        "negative-seed",
        "shuffle-str",
        "shard-tuple",
        "empty-forever",
    ],
)
def test_bad_sampler_arguments_are_named(kwargs: dict, error: type, names: str) -> None:
    with pytest.raises(error, match=names):
        IndexSampler(**kwargs)


@pytest.mark.parametrize(
    ("index", "count", "message"),
    [(2, 2, "shard_index"), (-1, 2, "shard_index"), (0, 0, "shard_count")],
)
def test_bad_shard_options_are_named(index: int, count: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShardOptions(index, count)


def test_no_sharding_is_one_shard() -> None:
    assert NoSharding().bounds(10) == (0, 10)
