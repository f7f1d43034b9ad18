"""A keyed bijection on `[0, n)`, evaluated for many positions at once.

The shuffle must be a real permutation of any size up to billions of records
without storing it, so it is computed, with a Feistel network on mixed radix:
a position is split as `x = left * q + right` with `left < p`, `right < q`,
and each round maps it to `right * p + (left + F(right)) % p`, which is a
bijection on `[0, p * q)` whatever `F` is (the next round splits with the
radices swapped). `p * q` is the smallest such product at least `n`, less
than `n + sqrt(n) + 1`, so "cycle walking" (applying the network again to the
rare outputs at or beyond `n`) is almost never needed, and restricts it to a
bijection on `[0, n)`.

`F` is multiply-shift hashing keyed per round, scaled to the radix without a
division, and the sum is reduced with one comparison: a round costs one
division (the split). Many positions are computed with numpy; a few with
plain ints, which skip numpy's fixed cost per call.
"""

from __future__ import annotations

import math

import numpy as np

ROUNDS = 4  # even, so that the output is split like the input
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MULTIPLIER = 0xD6E8FEB86659FD93  # odd: multiply-shift hashing needs an odd multiplier
_NUMPY_FROM = 32  # from this many positions on, numpy beats plain ints


def splitmix64(value: int) -> int:
    """SplitMix64's finaliser on one Python int: a well-mixed 64-bit hash."""
    value = (value + _GOLDEN) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


class Permutation:
    """A bijection on `[0, size)` chosen by `key`; `permutation(positions)` maps many at once."""

    def __init__(self, size: int, key: int) -> None:
        if size < 1:
            raise ValueError(f"`size` must be at least 1, got {size}.")
        self.size = size
        self._p = max(1, math.isqrt(size - 1) + 1)
        self._q = max(1, -(-size // self._p))
        self._keys = [splitmix64(key ^ splitmix64(r)) for r in range(ROUNDS)]

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """Map `positions` (ints in `[0, size)`) to their images, as int64."""
        if len(positions) < _NUMPY_FROM:
            return np.array([self.one(p) for p in positions.tolist()], dtype=np.int64)
        values = self._rounds_numpy(positions.astype(np.int64))
        for i in np.flatnonzero(values >= self.size).tolist():
            values[i] = self.one(int(values[i]), walking=True)
        return values

    def one(self, position: int, walking: bool = False) -> int:
        """The image of one position (of an out-of-range image, when `walking`)."""
        value = position if walking else self._rounds(position)
        while value >= self.size:
            value = self._rounds(value)
        return value

    def _rounds(self, value: int) -> int:
        outer, inner = self._p, self._q
        for key in self._keys:
            left, right = divmod(value, inner)
            total = left + _hash_below(right, key, outer)
            value = right * outer + (total - outer if total >= outer else total)
            outer, inner = inner, outer
        return value

    def _rounds_numpy(self, values: np.ndarray) -> np.ndarray:
        outer, inner = np.uint64(self._p), np.uint64(self._q)
        values = values.astype(np.uint64)
        multiplier, shift = np.uint64(_MULTIPLIER), np.uint64(32)
        for key in self._keys:
            left, right = np.divmod(values, inner)
            below = (((right ^ np.uint64(key)) * multiplier) >> shift) * outer >> shift
            total = left + below
            values = right * outer + np.where(total >= outer, total - outer, total)
            outer, inner = inner, outer
        result: np.ndarray = values.astype(np.int64)
        return result


def _hash_below(value: int, key: int, bound: int) -> int:
    """A keyed hash of `value` in `[0, bound)`: 32 well-mixed bits of the product,
    scaled to the bound by a multiplication (Lemire's method) rather than a slower modulo."""
    return (((((value ^ key) * _MULTIPLIER) & _MASK64) >> 32) * bound) >> 32
