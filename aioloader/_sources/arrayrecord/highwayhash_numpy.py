"""HighwayHash-64 in NumPy and Python: the fallback where the C version cannot be built.

`highwayhash` uses this module only on machines without a working C
compiler (or when told to, for tests). It reads a message in 32-byte
packets, and each packet's update depends on the state the previous one
left, so one message cannot be split up. The speed comes from hashing many
messages side by side instead: every message is a row of four (n, 4) uint64
state arrays, and each packet step is a fixed run of about twenty numpy
operations over all the messages that still have packets; the byte shuffle
between lane pairs ("zipper merge") is one `take` over the state's bytes.
uint64 arrays wrap on overflow as the C code's integers do, without a
warning. When only a message or two are left (a long chunk), numpy's cost
per call is no longer shared, and the rest is fed on Python integers, about
twice as fast. Either way a long message hashes at only 1-3 MB/s per
thread, a few hundred times slower than the C version.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

# Plain Python values: subinterpreters import this module with a stand-in for
# numpy (see `_executors/interpreter/prelude.py`), so nothing here may call it.
_WORD = "<u8"
_LOW = 0xFFFFFFFF
_INIT_MUL0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
_INIT_MUL1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)
# The zipper merge as a shuffle of the 32 state bytes: lanes 0-1, then lanes 2-3.
_PAIR = (3, 12, 2, 5, 14, 1, 15, 0, 11, 4, 10, 13, 9, 6, 8, 7)
_ZIPPER = _PAIR + tuple(i + 16 for i in _PAIR)
_PERMUTE = [2, 3, 0, 1]
_FINAL_ROUNDS = 4
# Messages fed on Python integers once no more than this many still have packets
# (measured: a numpy step costs about as much as 2 packets in Python).
_PYTHON_BELOW = 2


class _State:
    """The state of `len(v0)` hashes: four (n, 4) arrays, and scratch space for the update."""

    def __init__(self, v0: np.ndarray, v1: np.ndarray, mul0: np.ndarray, mul1: np.ndarray) -> None:
        self.v0, self.v1, self.mul0, self.mul1 = v0, v1, mul0, mul1
        self._product = np.empty_like(v0)
        self._half = np.empty_like(v0)
        self._shuffled = np.empty((len(v0), 32), np.uint8)
        self._zipper = np.array(_ZIPPER)

    @classmethod
    def start(cls, n: int, key: Sequence[int]) -> _State:
        words = np.array(key, _WORD)
        mul0 = np.tile(np.array(_INIT_MUL0, _WORD), (n, 1))
        mul1 = np.tile(np.array(_INIT_MUL1, _WORD), (n, 1))
        return cls(mul0 ^ words, mul1 ^ _swap_halves(words), mul0, mul1)

    def first(self, rows: int) -> _State:
        """The first `rows` hashes, as views: updating them updates these."""
        return _State(self.v0[:rows], self.v1[:rows], self.mul0[:rows], self.mul1[:rows])

    def update(self, lanes: np.ndarray) -> None:
        """Feed one packet to every hash: `lanes` holds a row of four words for each."""
        v0, v1, mul0, mul1 = self.v0, self.v1, self.mul0, self.mul1
        product, half, shuffled, zipper = self._product, self._half, self._shuffled, self._zipper
        v1 += mul0
        v1 += lanes
        _multiply_halves(v1, v0, product, half)
        mul0 ^= product
        v0 += mul1
        _multiply_halves(v0, v1, product, half)
        mul1 ^= product
        np.take(v1.view(np.uint8), zipper, axis=1, out=shuffled)
        v0 += shuffled.view(_WORD)
        np.take(v0.view(np.uint8), zipper, axis=1, out=shuffled)
        v1 += shuffled.view(_WORD)

    def rows(self, which: np.ndarray) -> _State:
        """A copy of the hashes at `which` (the messages that end in a partial packet)."""
        return _State(self.v0[which], self.v1[which], self.mul0[which], self.mul1[which])

    def words(self, j: int) -> list[int]:
        """Hash `j`'s state as 16 Python integers: v0, v1, mul0, mul1."""
        return [int(w) for w in np.concatenate((self.v0[j], self.v1[j], self.mul0[j], self.mul1[j])).tolist()]

    def set_words(self, j: int, words: list[int]) -> None:
        """Set hash `j`'s state from `words()`'s form."""
        for i, array in enumerate((self.v0, self.v1, self.mul0, self.mul1)):
            array[j] = words[4 * i : 4 * i + 4]

    def put_rows(self, which: np.ndarray, part: _State) -> None:
        """Write back hashes taken with `rows(which)`."""
        self.v0[which], self.v1[which], self.mul0[which], self.mul1[which] = (
            part.v0,
            part.v1,
            part.mul0,
            part.mul1,
        )

    def finish(self) -> list[int]:
        """The 64-bit hashes, after the final rounds."""
        for _ in range(_FINAL_ROUNDS):
            self.update(_swap_halves(self.v0[:, _PERMUTE]))
        total = self.v0[:, 0] + self.v1[:, 0]
        total += self.mul0[:, 0]
        total += self.mul1[:, 0]
        return [int(value) for value in total.tolist()]


def _swap_halves(words: np.ndarray) -> np.ndarray:
    return (words >> 32) | (words << 32)


def _multiply_halves(low_of: np.ndarray, high_of: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """`out = (low_of & 0xFFFFFFFF) * (high_of >> 32)`: exact, the product fits 64 bits."""
    np.bitwise_and(low_of, _LOW, out=out)
    np.right_shift(high_of, 32, out=scratch)
    out *= scratch


def hash64_many(messages: Sequence[bytes | memoryview], key: Sequence[int]) -> list[int]:
    """HighwayHash-64 of each message under `key` (four 64-bit words), in order.

    Thread-safe (no shared state). Messages are hashed together, longest
    first, so the cost is about that of the longest.
    """
    n = len(messages)
    sizes = np.array([len(message) for message in messages], dtype=np.int64)
    packets = sizes // 32
    order = np.argsort(-packets, kind="stable")
    state = _State.start(n, key)
    _full_packets(state, [messages[i] for i in order.tolist()], packets[order])
    _partial_packets(state, [messages[i] for i in order.tolist()], sizes[order])
    hashes = state.finish()
    result = [0] * n
    for slot, value in zip(order.tolist(), hashes, strict=True):
        result[slot] = value
    return result


def _full_packets(state: _State, ordered: list[bytes | memoryview], packets: np.ndarray) -> None:
    """Feed every whole packet; `ordered` is sorted by packet count, longest first.

    The packets of all messages lie end to end in one array of rows of four
    words; step `k` feeds row `first[j] + k` to each message `j` that still
    has packets, and those are always the first few, since the longest come
    first. A numpy step costs about what `_PYTHON_BELOW` packets cost on
    Python integers, so the last few messages finish one by one in Python.
    """
    if not len(packets) or packets[0] == 0:
        return
    joined = b"".join(memoryview(m)[: 32 * int(p)] for m, p in zip(ordered, packets.tolist(), strict=True))
    words = np.frombuffer(joined, _WORD).reshape(-1, 4)
    first = np.concatenate(([0], np.cumsum(packets)[:-1]))
    step = 0
    for running in range(len(packets), _PYTHON_BELOW, -1):  # how many messages still have packets
        last = int(packets[running - 1])
        part, rows = state.first(running), first[:running]
        for k in range(step, last):
            part.update(words[rows + k])
        step = max(step, last)
    for j in range(min(_PYTHON_BELOW, len(packets))):
        begin, end = int(first[j]) + step, int(first[j] + packets[j])
        if end > begin:
            state.set_words(j, _python_packets(state.words(j), memoryview(joined)[32 * begin : 32 * end]))


_MASK = (1 << 64) - 1


def _python_packets(words: list[int], data: memoryview) -> list[int]:
    """The Update of the C code on Python integers, for one message's `data` (whole packets).

    `words` and the result are v0, v1, mul0 and mul1, four lanes each. The
    four lanes are written out, one after another, on local variables: a
    loop over lists costs about half as much again.
    """
    a0, a1, a2, a3, b0, b1, b2, b3, m0, m1, m2, m3, n0, n1, n2, n3 = words
    for l0, l1, l2, l3 in struct.iter_unpack("<4Q", data):
        b0 = (b0 + m0 + l0) & _MASK
        m0 ^= (b0 & _LOW) * (a0 >> 32)
        a0 = (a0 + n0) & _MASK
        n0 ^= (a0 & _LOW) * (b0 >> 32)
        b1 = (b1 + m1 + l1) & _MASK
        m1 ^= (b1 & _LOW) * (a1 >> 32)
        a1 = (a1 + n1) & _MASK
        n1 ^= (a1 & _LOW) * (b1 >> 32)
        b2 = (b2 + m2 + l2) & _MASK
        m2 ^= (b2 & _LOW) * (a2 >> 32)
        a2 = (a2 + n2) & _MASK
        n2 ^= (a2 & _LOW) * (b2 >> 32)
        b3 = (b3 + m3 + l3) & _MASK
        m3 ^= (b3 & _LOW) * (a3 >> 32)
        a3 = (a3 + n3) & _MASK
        n3 ^= (a3 & _LOW) * (b3 >> 32)
        x1, x0 = _zipper(b1, b0)
        a1, a0 = (a1 + x1) & _MASK, (a0 + x0) & _MASK
        x1, x0 = _zipper(b3, b2)
        a3, a2 = (a3 + x1) & _MASK, (a2 + x0) & _MASK
        x1, x0 = _zipper(a1, a0)
        b1, b0 = (b1 + x1) & _MASK, (b0 + x0) & _MASK
        x1, x0 = _zipper(a3, a2)
        b3, b2 = (b3 + x1) & _MASK, (b2 + x0) & _MASK
    return [a0, a1, a2, a3, b0, b1, b2, b3, m0, m1, m2, m3, n0, n1, n2, n3]


def _zipper(high: int, low: int) -> tuple[int, int]:
    """The byte shuffle `_ZIPPER` of one lane pair, on integers: what to add to each lane."""
    add_low = (
        (((low & 0xFF000000) | (high & 0xFF00000000)) >> 24)
        | (((low & 0xFF0000000000) | (high & 0xFF000000000000)) >> 16)
        | (low & 0xFF0000)
        | ((low & 0xFF00) << 32)
        | ((high & 0xFF00000000000000) >> 8)
        | ((low & 0xFF) << 56)
    )
    add_high = (
        (((high & 0xFF000000) | (low & 0xFF00000000)) >> 24)
        | (high & 0xFF0000)
        | ((high & 0xFF0000000000) >> 16)
        | ((high & 0xFF00) << 24)
        | ((low & 0xFF000000000000) >> 8)
        | ((high & 0xFF) << 48)
        | (low & 0xFF00000000000000)
    )
    return add_high, add_low


def _partial_packets(state: _State, ordered: list[bytes | memoryview], sizes: np.ndarray) -> None:
    """Feed the last `size % 32` bytes of each message that has them, as HighwayHash pads them."""
    remainders = sizes % 32
    which = np.flatnonzero(remainders)
    if not len(which):
        return
    lanes = np.frombuffer(
        b"".join(_last_packet(ordered[i], int(remainders[i])) for i in which.tolist()), _WORD
    ).reshape(-1, 4)
    part = state.rows(which)
    count = remainders[which].astype(_WORD)[:, None]
    part.v0 += (count << 32) + count
    low, high = part.v1 & _LOW, part.v1 >> 32
    part.v1[:] = _rotate32(low, count) | (_rotate32(high, count) << 32)
    part.update(lanes)
    state.put_rows(which, part)


def _rotate32(half: np.ndarray, count: np.ndarray) -> np.ndarray:
    rotated: np.ndarray = ((half << count) | (half >> (32 - count))) & _LOW
    return rotated


def _last_packet(message: bytes | memoryview, size: int) -> bytes:
    """The 32-byte packet HighwayHash makes of a message's last `size` (1 to 31) bytes.

    Whole 4-byte groups go first; of the 1 to 3 bytes left, either the last
    four bytes of the message go to bytes 28-31 (when `size` >= 16), or the
    first, middle and last of them to bytes 16-18.
    """
    tail = bytes(memoryview(message)[len(message) - size :])
    whole, left = size & ~3, size & 3
    packet = bytearray(32)
    packet[:whole] = tail[:whole]
    if size & 16:
        packet[28:32] = tail[size - 4 :]
    elif left:
        rest = tail[whole:]
        packet[16:19] = bytes((rest[0], rest[left >> 1], rest[left - 1]))
    return bytes(packet)
