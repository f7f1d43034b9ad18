"""A keyed bijection on `[0, n)`, evaluated for many positions at once.

The shuffle must be a real permutation of any size up to billions of records
without storing it, so it is computed: a balanced Feistel network on the
smallest even number of bits that covers `n` is a bijection on that power of
two whatever its round function, and "cycle walking" (applying it again to the
outputs that land at or beyond `n`) restricts it to a bijection on `[0, n)`.
The domain is less than 4n, so a position needs fewer than 4 walks on average.
"""

from __future__ import annotations

import numpy as np

ROUNDS = 6
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def splitmix64(value: int) -> int:
    """SplitMix64's finaliser on one Python int: a well-mixed 64-bit hash."""
    value = (value + _GOLDEN) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def _mix(values: np.ndarray) -> np.ndarray:
    """The same finaliser on a uint64 array (numpy wraps uint64 products)."""
    values = np.asarray(values ^ (values >> np.uint64(30)), dtype=np.uint64)
    values = values * np.uint64(0xBF58476D1CE4E5B9)
    values = values ^ (values >> np.uint64(27))
    values = values * np.uint64(0x94D049BB133111EB)
    mixed: np.ndarray = values ^ (values >> np.uint64(31))
    return mixed


class Permutation:
    """A bijection on `[0, size)` chosen by `key`; `permutation(positions)` maps many at once."""

    def __init__(self, size: int, key: int) -> None:
        if size < 1:
            raise ValueError(f"`size` must be at least 1, got {size}.")
        self.size = size
        self._half_bits = max(1, ((size - 1).bit_length() + 1) // 2)
        self._half_mask = np.uint64((1 << self._half_bits) - 1)
        self._round_keys = [np.uint64(splitmix64(key ^ splitmix64(r))) for r in range(ROUNDS)]

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """Map `positions` (ints in `[0, size)`) to their images, as int64."""
        values = positions.astype(np.uint64)
        limit = np.uint64(self.size)
        outside = np.ones(values.shape, dtype=bool)
        while outside.any():
            values[outside] = self._feistel(values[outside])
            outside = values >= limit
        return values.astype(np.int64)

    def _feistel(self, values: np.ndarray) -> np.ndarray:
        shift = np.uint64(self._half_bits)
        left, right = values >> shift, values & self._half_mask
        for round_key in self._round_keys:
            left, right = right, left ^ (_mix(right ^ round_key) & self._half_mask)
        return (left << shift) | right
