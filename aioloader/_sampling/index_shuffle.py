"""Grain's index shuffle: where position `i` lands in a keyed permutation of `[0, max_index]`.

Grain shuffles with a small block cipher and "cycle walking": the Simon
Feistel structure (round function `(x <<< 1) & (x <<< 8) ^ (x <<< 2)` on
words of `W` bits) permutes `[0, 2 ** (2 * W))`, and an image above
`max_index` is encrypted again until it lands in range, which restricts the
cipher to a permutation of `[0, max_index]`. The block is the even number of
bits at least `ceil(log2(max_index))`, and at least 16; the round keys are the
first `rounds` words of C++'s `std::seed_seq{seed}`. This module computes the
same permutation as Grain 0.2.18 (`grain._src.python.experimental.index_shuffle`),
for a whole array of positions at once with numpy.

One deliberate difference. Grain sizes the block with `ceil(log2(max_index))`
in floating point, which is one bit short when `max_index` is itself a power
of two (a shard of `4 ** k + 1` records, k >= 8: 65,537, 262,145, ...): its
top position is truncated, lands where position 0 lands, and the value
`max_index` is never produced, so one record is read twice and one never.
Here every position that does not fit the block maps to itself, so the
result is always a permutation; all other positions agree with Grain.

Cycle walking is fast when at least a quarter of the block is in range,
which holds for every block above the 16-bit minimum. Below it (fewer than
16,384 positions), the whole permutation is computed at once by pointer
jumping over the 65,536-entry block and kept: a few milliseconds per
(max_index, seed), and at most 128 KiB for each of the few kept.

Above it, the cost of an array is set by its slowest position: each pass
costs numpy's fixed cost per call (about 15 calls), and the last positions
of an array of 128 need 12 to 17 passes when a quarter to a third of the
block is in range: about 1 us a position, as much as the rest of the
loader's work on small records. The loader asks for consecutive positions,
chunk after chunk, so `index_shuffle_range` computes them in blocks of
`RANGE_BLOCK` and keeps the last few: the passes are paid once per block.
But a permutation's first lookups, its first `_FIRST_DIRECT` positions,
compute only their own positions: a loader's first batch waits for its 32
keys (0.1 ms), not for a block of 16,384 (1-2 ms on CPython 3.11 and 3.13t,
and more where threads share the first batch, each computing the same block
at once).
A pass then costs about 9 ns a position that takes it (a table of
`mix ^ key` per round, indexed by halves kept as intp, and only the blocks
still out of range gathered for the next pass): 9 to 45 ns a position in all
on CPython 3.13t, from 1 to 3.4 passes on average.
"""

from __future__ import annotations

import collections
import functools
import math
import threading
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:  # not at run time: NumPy may be a stand-in there (in a subinterpreter)
    from numpy.typing import ArrayLike

MIN_BLOCK_BITS = 16
_U32 = 0xFFFFFFFF
_KEPT = 4  # permutations (and keys) kept: a sampler moves through epochs in order
_FEW = 16  # below this many positions, plain ints beat numpy's fixed cost per call
_TABLED_ROUNDS = 8  # up to this many rounds, a table per round key (at most 512 KiB each)
RANGE_BLOCK = 16384  # consecutive positions computed together by `index_shuffle_range` (128 KiB)
_RANGE_BLOCKS_KEPT = 8  # per permutation: more than the chunks that workers hold at once
_FIRST_DIRECT = RANGE_BLOCK // 8  # a permutation's first positions, computed alone (not a block)
_SLICE = 4096  # positions encrypted together by `_whole_permutation`: 32 KiB arrays, reused
_SQUARINGS = 5  # ... and how often it squares its table of jumps (see there)
_Word = TypeVar("_Word", int, "np.ndarray")  # a string: NumPy may be a stand-in (subinterpreters)


def index_shuffle(index: int, max_index: int, seed: int, rounds: int = 4) -> int:
    """Where `index` lands in the permutation of `[0, max_index]` keyed by `seed`.

    Equal to Grain's `index_shuffle(index, max_index, seed, rounds)` (see the
    module docstring for the one case where Grain's is not a permutation).
    Raises ValueError for an index out of range or an odd `rounds` below 4.
    """
    return int(index_shuffle_array([index], max_index, seed, rounds)[0])


def index_shuffle_array(indices: ArrayLike, max_index: int, seed: int, rounds: int = 4) -> np.ndarray:
    """`index_shuffle` of every position in `indices`, computed together: an int64 array.

    Costs O(len(indices)) time and memory, plus the kept permutation below
    the 16-bit block (see the module docstring). Thread-safe.
    """
    positions = _positions(indices)
    _check_arguments(positions, max_index, seed, rounds)
    if max_index == 0:
        return np.zeros(positions.shape, dtype=np.int64)
    return _cipher(max_index, seed, rounds).shuffle(positions)


def index_shuffle_range(first: int, count: int, max_index: int, seed: int, rounds: int = 4) -> np.ndarray:
    """`index_shuffle_array(range(first, first + count), ...)`, from blocks kept between calls.

    The same values, at a fraction of the cost when called for consecutive
    runs of positions (see the module docstring). Thread-safe.
    """
    _check_arguments(np.array([first, first + count - 1] if count else [], np.int64), max_index, seed, rounds)
    if max_index == 0:
        return np.zeros(count, dtype=np.int64)
    return _cipher(max_index, seed, rounds).shuffle_range(first, count).copy()  # the caller's own


def shuffled_range(first: int, count: int, max_index: int, seed: int) -> np.ndarray:
    """`index_shuffle_range` with 4 rounds, for arguments the caller has checked (the
    samplers): no check costs per call, and a view of a kept block where it can be
    (read-only; the caller copies it, as `+` or `tolist` do)."""
    if max_index == 0:
        return np.zeros(count, dtype=np.int64)
    return _cipher(max_index, seed, 4).shuffle_range(first, count)


def _positions(indices: ArrayLike) -> np.ndarray:
    array = np.asarray(indices)
    if array.size and array.dtype.kind not in "iu":
        raise TypeError(f"`indices` must be integers, got an array of {array.dtype}.")
    return array.astype(np.int64)


def _check_arguments(positions: np.ndarray, max_index: int, seed: int, rounds: int) -> None:
    if isinstance(max_index, bool) or not isinstance(max_index, int) or not 0 <= max_index < 2**63:
        raise ValueError(f"`max_index` must be an int in [0, 2**63), got {max_index!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _U32:
        raise ValueError(f"`seed` must be an int in [0, 2**32), got {seed!r}.")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 4 or rounds % 2:
        raise ValueError(f"`rounds` must be an even int >= 4, got {rounds!r}.")
    if positions.size and (positions.min() < 0 or positions.max() > max_index):
        wrong = positions[(positions < 0) | (positions > max_index)][0]
        raise ValueError(f"`index` must be in [0, max_index={max_index}], got {wrong}.")


@functools.lru_cache(maxsize=_KEPT)
def _cipher(max_index: int, seed: int, rounds: int) -> _Cipher:
    return _Cipher(max_index, seed, rounds)


def seed_seq_words(seed: int, count: int) -> list[int]:
    """The first `count` words of C++'s `std::seed_seq{seed}.generate`, as the C++ standard
    specifies it ([rand.util.seedseq]): Grain's round keys."""
    words = [0x8B8B8B8B] * count
    t = next((t for least, t in ((623, 11), (68, 7), (39, 5), (7, 3)) if count >= least), (count - 1) // 2)
    p = (count - t) // 2
    q, m = p + t, max(2, count)  # m = max(number of seeds + 1, count)
    for k in range(m):
        mixed = words[k % count] ^ words[(k + p) % count] ^ words[(k - 1) % count]
        r1 = 1664525 * (mixed ^ (mixed >> 27)) & _U32
        r2 = (r1 + (1 if k == 0 else k % count + (seed if k == 1 else 0))) & _U32
        words[(k + p) % count] = (words[(k + p) % count] + r1) & _U32
        words[(k + q) % count] = (words[(k + q) % count] + r2) & _U32
        words[k % count] = r2
    for k in range(m, m + count):
        mixed = (words[k % count] + words[(k + p) % count] + words[(k - 1) % count]) & _U32
        r3 = 1566083941 * (mixed ^ (mixed >> 27)) & _U32
        r4 = (r3 - k % count) & _U32
        words[(k + p) % count] ^= r3
        words[(k + q) % count] ^= r4
        words[k % count] = r4
    return words


def block_bits(max_index: int) -> int:
    """The cipher's block size in bits for `max_index > 0`, computed as Grain computes it:
    `ceil(log2(max_index))` in double precision, made even, at least 16."""
    bits = math.ceil(math.log2(float(max_index)))
    return max(bits + bits % 2, MIN_BLOCK_BITS)


class _Cipher:
    """The restricted permutation for one (max_index, seed, rounds); immutable once made.

    Words are at most 32 bits, so each half of the block is a uint32 array
    (intp for words of up to 16 bits, where each round is a table lookup).
    """

    def __init__(self, max_index: int, seed: int, rounds: int) -> None:
        bits = block_bits(max_index)
        self._max, self._word = max_index, bits // 2
        self._mask = (1 << self._word) - 1
        self._keys = [key & self._mask for key in seed_seq_words(seed, rounds)]
        # Positions from here on do not fit the block and map to themselves (see the
        # module docstring); max_index + 1 when every position fits.
        self._unfit_from = 1 << bits if max_index >= 1 << bits else max_index + 1
        # Words of up to 16 bits: each round is one lookup in a table of `simon_mix(x) ^ key`,
        # with halves and tables as intp, numpy's index type (a uint16 index is converted on
        # every lookup: 8 ns a position and pass against 3); wider words compute the mix on
        # uint32 halves of uint64 blocks (a 64-bit block does not fit an int64).
        tabled = self._word <= 16 and rounds <= _TABLED_ROUNDS
        self._half: type[np.integer] = np.intp if tabled else np.uint32
        self._whole: type[np.integer] = np.int64 if tabled else np.uint64
        self._round_tables = _round_tables(self._word, tuple(self._keys)) if tabled else None
        self._permutation = self._whole_permutation() if 4 * (max_index + 1) < 1 << bits else None
        self._blocks: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        self._blocks_lock = threading.Lock()  # guards `_blocks`; blocks are computed outside it
        self._direct = _FIRST_DIRECT  # positions left to compute alone (see the module docstring)

    def shuffle(self, positions: np.ndarray) -> np.ndarray:
        """The images of `positions` (all in `[0, max_index]`), as int64."""
        if self._permutation is not None:
            result: np.ndarray = self._permutation[positions]
            return result
        if positions.size < _FEW:
            return np.array([self._one(p) for p in positions.tolist()], dtype=np.int64)
        values = self._walk(positions).astype(np.int64, copy=False)
        if self._unfit_from <= self._max:
            values = np.where(positions >= self._unfit_from, positions, values)
        return values

    def shuffle_range(self, first: int, count: int) -> np.ndarray:
        """The images of positions `[first, first + count)` (all in range), from kept blocks:
        int64, read-only (a view of a kept block or permutation where it can be)."""
        if self._permutation is not None:
            return self._permutation[first : first + count]
        if count <= self._direct and not self._blocks:  # the first batch, and a few chunks after it
            # Unlocked: threads at once may compute a few more positions alone, never other values.
            self._direct -= count
            images = self.shuffle(np.arange(first, first + count, dtype=np.int64))
            images.flags.writeable = False
            return images
        block, offset = divmod(first, RANGE_BLOCK)
        if offset + count <= RANGE_BLOCK:  # within one block (most chunks): a view of it
            return self._block(block)[offset : offset + count]
        out = np.empty(count, dtype=np.int64)
        done = 0
        while done < count:
            block, offset = divmod(first + done, RANGE_BLOCK)
            images = self._block(block)
            taken = min(count - done, images.size - offset)
            out[done : done + taken] = images[offset : offset + taken]
            done += taken
        return out

    def _block(self, block: int) -> np.ndarray:
        """The images of block `block` of `RANGE_BLOCK` positions: kept, or computed now.

        Two threads may compute the same block at once; both get equal values."""
        with self._blocks_lock:
            images = self._blocks.get(block)
            if images is not None:
                self._blocks.move_to_end(block)
                return images
        start = block * RANGE_BLOCK
        images = self.shuffle(np.arange(start, min(start + RANGE_BLOCK, self._max + 1), dtype=np.int64))
        images.flags.writeable = False
        with self._blocks_lock:
            self._blocks[block] = images
            while len(self._blocks) > _RANGE_BLOCKS_KEPT:
                self._blocks.popitem(last=False)
        return images

    def _walk(self, positions: np.ndarray) -> np.ndarray:
        """Encrypt, and encrypt again the images past `max_index` until all are in range.

        After the first pass, only the halves of the blocks still out of range
        go on, gathered into arrays of their own that shrink with each pass:
        their images overwrite their places in the result, the last in range."""
        left, right = self._split(positions)
        self._encrypt(left, right)
        joined = self._join(left, right)
        limit = self._whole(self._max)
        pending = np.flatnonzero(joined > limit)
        left, right = left[pending], right[pending]
        while pending.size:
            self._encrypt(left, right)
            images = self._join(left, right)
            joined[pending] = images
            still = np.flatnonzero(images > limit)
            pending, left, right = pending[still], left[still], right[still]
        return joined

    def _split(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The two halves of blocks, masked to a word each: a position that does not
        fit the block is cut short here, and `shuffle` keeps it as it was."""
        whole = values.astype(self._whole, copy=False)
        word, mask = self._whole(self._word), self._whole(self._mask)
        left = ((whole >> word) & mask).astype(self._half, copy=False)
        return left, (whole & mask).astype(self._half, copy=False)

    def _join(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """The blocks of two arrays of halves."""
        whole = self._whole
        joined: np.ndarray = (left.astype(whole, copy=False) << whole(self._word)) | right.astype(
            whole, copy=False
        )
        return joined

    def _encrypt(self, left: np.ndarray, right: np.ndarray) -> None:
        """One pass of the Simon Feistel rounds over blocks of two words, in place."""
        tables = self._round_tables
        if tables is not None:  # two lookups and two xors a round pair, on 16-bit halves
            for k in range(0, len(tables), 2):
                left ^= tables[k][right]
                right ^= tables[k + 1][left]
            return
        half = self._half  # the keys in the halves' dtype: the xor keeps it
        for k in range(0, len(self._keys), 2):
            left ^= simon_mix(right, self._word) ^ half(self._keys[k])
            right ^= simon_mix(left, self._word) ^ half(self._keys[k + 1])

    def _one(self, position: int) -> int:
        """The image of one position, with plain ints: no numpy fixed cost per call."""
        if position >= self._unfit_from:
            return position
        value = self._encrypt_one(position)
        while value > self._max:
            value = self._encrypt_one(value)
        return value

    def _encrypt_one(self, value: int) -> int:
        word, mask = self._word, self._mask
        left, right = (value >> word) & mask, value & mask
        for k in range(0, len(self._keys), 2):
            left ^= simon_mix(right, word) ^ self._keys[k]
            right ^= simon_mix(left, word) ^ self._keys[k + 1]
        return (left << word) | right

    def _whole_permutation(self) -> np.ndarray:
        """The permutation of `[0, max_index]` when few of the block's values are in range.

        Cycle walking would take hundreds of passes. Instead: `jump[y]` is `y`
        for values in range and the cipher's image otherwise; squaring it
        (`jump = jump[jump]`) doubles how far each pointer walks, and values in
        range stay put, so after `_SQUARINGS` squarings each position walks the
        rest of its way in steps of `2 ** _SQUARINGS`. In int32, and encrypted a
        slice at a time: this runs before a loader's first batch, where fresh
        memory is most of the cost (a page fault takes microseconds on a virtual
        machine), and the 65,536-entry arrays of int64 it made took 3-5 ms.
        """
        size, top = 1 << (2 * self._word), self._max
        jump = np.empty(size, dtype=np.int32)
        for start in range(0, size, _SLICE):
            left, right = self._split(np.arange(start, start + _SLICE, dtype=self._whole))
            self._encrypt(left, right)
            jump[start : start + _SLICE] = self._join(left, right)
        ends = jump[: top + 1].copy()  # each position's first image
        jump[: top + 1] = np.arange(top + 1, dtype=np.int32)
        spare = np.empty_like(jump)
        for _ in range(_SQUARINGS):
            np.take(jump, jump, out=spare)
            jump, spare = spare, jump
        walking = np.flatnonzero(ends > top)
        while walking.size:
            ends[walking] = jump[ends[walking]]
            walking = walking[ends[walking] > top]
        table = ends.astype(np.int64)
        table.flags.writeable = False
        return table


@functools.cache
def _mix_table(word: int) -> np.ndarray:
    """`simon_mix` of every word of `word` bits (at most 16: 128 KiB)."""
    table = simon_mix(np.arange(1 << word, dtype=np.uint32), word).astype(np.uint16)
    table.flags.writeable = False
    return table


def _round_tables(word: int, keys: tuple[int, ...]) -> list[np.ndarray]:
    """For each round key, `simon_mix(x) ^ key` of every word `x` of `word` bits (at most 16),
    as intp: 8 KiB a key for 400,000 records (10-bit words), 512 KiB for 16-bit words."""
    mix = _mix_table(word)
    return [(mix ^ np.uint16(key)).astype(np.intp) for key in keys]


def simon_mix(x: _Word, word: int) -> _Word:
    """Simon's round function within a word of `word` bits: `(x <<< 1) & (x <<< 8) ^ (x <<< 2)`.

    For a plain int, or elementwise for a uint32 array."""
    mask = (1 << word) - 1

    def rotate(r: int) -> _Word:
        return ((x << r) | (x >> (word - r))) & mask

    mixed: _Word = (rotate(1) & rotate(8)) ^ rotate(2)
    return mixed
