"""`index_shuffle`: Grain's keyed permutation of `[0, max_index]`, computed for arrays at once.

Compared with Grain's own C++ `index_shuffle` where Grain is installed (the
3.11 session); on the other builds the permutation property and values
recorded from Grain 0.2.18 are checked.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from aioloader._sampling import index_shuffle as shuffle_module
from aioloader._sampling.index_shuffle import (
    RANGE_BLOCK,
    block_bits,
    index_shuffle,
    index_shuffle_array,
    index_shuffle_range,
    shuffled_range,
)
from tests.grain_reference import grain_index_shuffle

# (index, max_index, seed, rounds, Grain 0.2.18's index_shuffle of them), printed by Grain's module.
GRAIN_VALUES = [
    (0, 9, 0, 4, 0),
    (9, 9, 7, 4, 5),
    (1, 1, 5, 4, 0),
    (100, 16383, 4294967295, 4, 8322),
    (16383, 16384, 12345, 6, 12855),
    (65535, 65535, 3, 4, 55727),
    (123456, 200000, 99, 4, 134247),
    (1000000000, 2147483659, 42, 8, 1493224012),
    (1099511627779, 35184372088832, 1, 4, 13633232763345),
    (7, 4611686018427387909, 2024, 4, 1335137825474316196),
]

# Sizes on both sides of each way of computing: the whole-permutation table
# (under 16,384 positions), the 16-bit block with walking, larger blocks, and
# powers of two, where the block is exactly full or one bit larger.
MAX_INDICES = [
    1,
    2,
    9,
    99,
    1000,
    16382,
    16383,
    16384,
    50_000,
    65_535,
    65_536 - 2,
    131_072,
    1_000_003,
    2**24 - 1,
    2**25,
    2**33 + 7,  # words of 17 bits: the mix on uint32 halves, not a table
    2**63 - 2,  # a 64-bit block: its halves of 32 bits
]


@pytest.mark.parametrize("case", GRAIN_VALUES, ids=lambda c: f"max{c[1]}-seed{c[2]}-r{c[3]}")
def test_values_recorded_from_grain(case: tuple[int, int, int, int, int]) -> None:
    index, max_index, seed, rounds, expected = case
    assert index_shuffle(index, max_index, seed, rounds) == expected


@pytest.mark.parametrize("max_index", MAX_INDICES)
@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1])
def test_every_position_equals_grains(max_index: int, seed: int) -> None:
    grain = grain_index_shuffle()
    positions = _sample_positions(max_index, seed)
    ours = index_shuffle_array(positions, max_index, seed)
    assert ours.tolist() == [grain(p, max_index, seed, 4) for p in positions.tolist()]


@pytest.mark.parametrize("rounds", [4, 6, 8, 12, 40])  # tables per round key up to 8
def test_more_rounds_equal_grains(rounds: int) -> None:
    grain = grain_index_shuffle()
    for max_index in (57, 20_000, 3_000_000):
        positions = _sample_positions(max_index, rounds)
        ours = index_shuffle_array(positions, max_index, 11, rounds)
        assert ours.tolist() == [grain(p, max_index, 11, rounds) for p in positions.tolist()]


def test_random_arguments_equal_grains() -> None:
    grain = grain_index_shuffle()
    chooser = random.Random(12)
    for _ in range(300):
        max_index = chooser.choice(
            [chooser.randrange(1, 200), chooser.randrange(1, 1 << 20), chooser.randrange(1, 2**62)]
        )
        if max_index.bit_count() == 1 and max_index >= 1 << 16:
            continue  # Grain's one non-permutation; see test_full_power_of_four_blocks_stay_a_permutation
        index, seed = chooser.randrange(max_index + 1), chooser.randrange(2**32)
        assert index_shuffle(index, max_index, seed) == grain(index, max_index, seed, 4), (
            index,
            max_index,
            seed,
        )


@pytest.mark.parametrize("max_index", [1, 2, 9, 100, 16_383, 16_384, 65_535, 65_536, 65_537, 300_001])
@pytest.mark.parametrize("seed", [0, 3, 2**31 + 7])
def test_it_is_a_permutation(max_index: int, seed: int) -> None:
    images = index_shuffle_array(np.arange(max_index + 1), max_index, seed)
    assert np.array_equal(np.sort(images), np.arange(max_index + 1))


def test_full_power_of_four_blocks_stay_a_permutation() -> None:
    """Grain sizes the block one bit short for max_index = 4**k (k >= 8) and repeats a record:
    here the top position maps to itself, and every other position equals Grain's."""
    max_index = 4**8
    assert block_bits(max_index) == 16  # Grain's own (short) block size
    images = index_shuffle_array(np.arange(max_index + 1), max_index, 5)
    assert images[-1] == max_index
    assert np.array_equal(np.sort(images), np.arange(max_index + 1))
    grain = grain_index_shuffle()
    assert grain(max_index, max_index, 5, 4) == grain(0, max_index, 5, 4)  # Grain's repeat
    positions = _sample_positions(max_index - 1, 5)
    assert images[positions].tolist() == [grain(p, max_index, 5, 4) for p in positions.tolist()]


def test_it_shuffles_and_depends_on_the_seed() -> None:
    a = index_shuffle_array(np.arange(10_000), 9_999, 1)
    b = index_shuffle_array(np.arange(10_000), 9_999, 2)
    assert not np.array_equal(a, b)
    assert np.mean(a == np.arange(10_000)) < 0.01  # few records stay in place
    assert np.median(np.abs(np.diff(a))) > 100  # neighbours move far apart


@pytest.mark.parametrize("max_index", [0, 5, 40_000, 10**9, 10**12])
def test_the_scalar_and_the_array_forms_agree_in_any_order(max_index: int) -> None:
    positions = _sample_positions(max_index, 9)[::-1].copy()
    assert index_shuffle_array(positions, max_index, 9).tolist() == [
        index_shuffle(p, max_index, 9) for p in positions.tolist()
    ]


def test_an_empty_array_gives_an_empty_array() -> None:
    assert index_shuffle_array([], 10, 1).shape == (0,)


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (lambda: index_shuffle(11, 10, 1), ValueError, r"`index` must be in \[0, max_index=10\], got 11"),
        (lambda: index_shuffle(-1, 10, 1), ValueError, "got -1"),
        (lambda: index_shuffle(0, 10, 1, rounds=5), ValueError, "`rounds` must be an even int >= 4, got 5"),
        (lambda: index_shuffle(0, 10, 1, rounds=2), ValueError, "`rounds`"),
        (lambda: index_shuffle(0, 10, -1), ValueError, "`seed` must be an int in"),
        (lambda: index_shuffle(0, 10, 2**32), ValueError, "`seed`"),
        (lambda: index_shuffle(0, -1, 1), ValueError, "`max_index`"),
        (lambda: index_shuffle_array([0.5], 10, 1), TypeError, "`indices` must be integers"),
    ],
    ids=[
        "past-max",
        "negative",
        "odd-rounds",
        "two-rounds",
        "negative-seed",
        "seed-33-bits",
        "negative-max",
        "floats",
    ],
)
def test_bad_arguments_are_named(call: Callable[[], object], error: type, names: str) -> None:
    with pytest.raises(error, match=names):
        call()


def _sample_positions(max_index: int, seed: int) -> np.ndarray:
    """Every position of a small range; else its ends and 2,000 random ones."""
    if max_index < 5_000:
        return np.arange(max_index + 1)
    chooser = np.random.default_rng(seed)
    inner = chooser.integers(0, max_index + 1, 2_000)
    return np.concatenate([[0, 1, max_index - 1, max_index], inner])


@pytest.mark.parametrize("max_index", [0, *MAX_INDICES])
def test_ranges_from_kept_blocks_equal_the_array_form(max_index: int) -> None:
    # Runs that start and end inside blocks, span block boundaries, and come back to
    # blocks computed earlier or dropped since (the loader asks chunk after chunk).
    rng = random.Random(max_index)
    for _ in range(40):
        first = rng.randrange(max_index + 1)
        count = rng.randint(1, min(max_index + 1 - first, 3 * RANGE_BLOCK))
        expected = index_shuffle_array(np.arange(first, first + count), max_index, 11)
        assert index_shuffle_range(first, count, max_index, 11).tolist() == expected.tolist()


def test_ranges_from_many_threads_at_once_are_equal() -> None:
    max_index, chunk = 25 * RANGE_BLOCK, 160  # 20 blocks to walk, and more
    starts = list(range(0, 20 * RANGE_BLOCK, chunk))
    expected = {s: index_shuffle_array(np.arange(s, s + chunk), max_index, 5).tolist() for s in starts}
    index_shuffle_range(0, 1, max_index, 6)  # another seed's permutation: nothing kept for seed 5

    def check(offset: int) -> None:
        for s in starts[offset::4]:
            assert index_shuffle_range(s, chunk, max_index, 5).tolist() == expected[s]

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(check, range(4)))


@pytest.mark.parametrize("max_index", [4 * RANGE_BLOCK + 5, 2**33 + 7])
def test_a_permutations_first_positions_are_computed_alone_then_from_blocks(max_index: int) -> None:
    # The first batch waits for its own keys, not a block (see the module docstring); both
    # ways give the array form's values, the first 2048 positions alone and then blocks.
    seed = 1234 + max_index % 1000  # a permutation no other test has used
    cipher = shuffle_module._cipher(max_index, seed, 4)
    assert not cipher._blocks
    starts = [0, 32, RANGE_BLOCK - 16, 7 * RANGE_BLOCK // 2]
    for first, count in zip(starts, [32, 500, 32, 1400], strict=True):  # 1,964 positions alone
        expected = index_shuffle_array(np.arange(first, first + count), max_index, seed)
        images = shuffled_range(first, count, max_index, seed)
        assert images.tolist() == expected.tolist()
        assert not images.flags.writeable
    assert not cipher._blocks
    expected = index_shuffle_array(np.arange(532, 532 + 100), max_index, seed)
    assert shuffled_range(532, 100, max_index, seed).tolist() == expected.tolist()  # past the budget
    assert list(cipher._blocks) == [0]
