"""HighwayHash-64, the checksum of the Riegeli format, for many messages at once.

The hash runs in C (`highwayhash.c`), compiled with the system's C compiler
the first time it is needed (see `native`) and called through ctypes, which
releases the GIL around the call: threads hash in parallel on every build.
One call hashes a whole batch, so small headers do not pay a call each.
Where no compiler works, the NumPy version (`highwayhash_numpy`) gives the
same hashes a few hundred times slower, and the first hash logs a WARNING
on the "aioloader" logger that says so and what to do; setting
`AIOLOADER_PURE_HIGHWAYHASH=1` picks it without a warning (for tests).
"""

from __future__ import annotations

import ctypes
import os
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from pathlib import Path

import numpy as np

from aioloader._sources.arrayrecord import highwayhash_numpy, native

# Riegeli's key: 'Riegeli/', 'records\n', 'Riegeli/', 'records\n' as little-endian words.
RIEGELI_KEY = (0x2F696C6567656952, 0x0A7364726F636572, 0x2F696C6567656952, 0x0A7364726F636572)
PURE_ENV = "AIOLOADER_PURE_HIGHWAYHASH"
SOURCE = Path(__file__).with_name("highwayhash.c")

# Shorter messages are copied end to end into one buffer (one call for many
# headers); longer ones are hashed where they lie, a call each, not copied.
_JOIN_BELOW = 1 << 16

# A check of the built library against HighwayHash's published test vectors (the
# hash of bytes 0, 1, ..., n-1 under this key): each branch of the last packet.
_CHECK_KEY = (0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x1716151413121110, 0x1F1E1D1C1B1A1918)
_CHECK_HASHES = {
    0: 0x907A56DE22C26E53,
    3: 0x5C6BEFAB8A463D80,
    20: 0x38AD9B1141D3DD16,
    33: 0x2C90F73CA03181FC,
    64: 0x75542C5D4CD2A6FF,
}

Hasher = Callable[[Sequence[bytes | memoryview], Sequence[int]], list[int]]

_chosen: list[Hasher] = []
_choosing = threading.Lock()


def hash64_many(messages: Sequence[bytes | memoryview], key: Sequence[int] = RIEGELI_KEY) -> list[int]:
    """HighwayHash-64 of each message under `key` (four 64-bit words), in order. Thread-safe.

    The first call in a process loads (or builds) the C library; calls from
    other threads meanwhile wait for it.
    """
    return _implementation()(messages, key)


def implementation() -> str:
    """Where the hashes come from: "C" (the compiled library) or "NumPy" (loads it on the first call)."""
    return "NumPy" if _implementation() is highwayhash_numpy.hash64_many else "C"


def _implementation() -> Hasher:
    """The hash function, chosen once per process: one thread chooses, the others wait."""
    if not _chosen:
        with _choosing:
            if not _chosen:
                _chosen.append(_choose())
    return _chosen[0]


def _choose() -> Hasher:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return highwayhash_numpy.hash64_many
    try:
        return _Compiled(native.load(SOURCE))
    except native.BuildError as error:
        import logging  # only to say this: it costs a few ms to import before a first batch

        logging.getLogger("aioloader").warning(
            "Verifying ArrayRecord checksums will be slow (1-3 MB/s per thread on large chunks): "
            "the C version of HighwayHash could not be built (%s), so a NumPy version runs instead. "
            "Install a C compiler (cc, gcc or clang on PATH, or set CC) to make it a few hundred "
            "times faster, or pass verify_checksums=False to ArrayRecordDataSource for storage you trust.",
            error,
        )
        return highwayhash_numpy.hash64_many


class _Compiled:
    """HighwayHash-64 in the C library: the short messages in one call, each long one in its own."""

    def __init__(self, library: ctypes.CDLL) -> None:
        function = library.aioloader_highwayhash64_many
        # (key, data, offsets, count, hashes): pointers are passed as addresses or bytes objects.
        function.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        function.restype = None
        self._function = function
        if self([bytes(range(n)) for n in _CHECK_HASHES], _CHECK_KEY) != list(_CHECK_HASHES.values()):
            name = native.library_path(SOURCE)
            raise native.BuildError(f"{name} gives wrong hashes for the test vectors (a faulty compiler)")

    def __call__(self, messages: Sequence[bytes | memoryview], key: Sequence[int]) -> list[int]:
        words, hashes = array("Q", key), [0] * len(messages)
        for which, data in _buffers(messages):
            found = self._run(words, data, [len(messages[i]) for i in which])
            for i, value in zip(which, found, strict=True):
                hashes[i] = value
        return hashes

    def _run(self, key: array[int], data: bytes | int, sizes: list[int]) -> list[int]:
        """The hashes of the messages of `sizes` bytes that lie end to end at `data`."""
        offsets = array("Q", accumulate(sizes, initial=0))
        hashes = array("Q", bytes(8 * len(sizes)))
        addresses = (key.buffer_info()[0], offsets.buffer_info()[0], hashes.buffer_info()[0])
        self._function(addresses[0], data, addresses[1], len(sizes), addresses[2])
        return hashes.tolist()


def _buffers(messages: Sequence[bytes | memoryview]) -> Iterator[tuple[list[int], bytes | int]]:
    """Which messages to hash in one call, and the buffer that holds them end to end.

    A `bytes` buffer goes to C as a pointer to its contents; an int is the
    address of a long message's bytes, valid while `messages` holds it.
    """
    short = [i for i, message in enumerate(messages) if len(message) < _JOIN_BELOW]
    if short:
        yield short, b"".join([messages[i] for i in short])
    for i, message in enumerate(messages):
        if len(message) >= _JOIN_BELOW:
            yield [i], message if isinstance(message, bytes) else _address(message)


def _address(message: memoryview) -> int:
    """Where `message`'s bytes lie in memory, without copying them (ctypes cannot take a
    read-only buffer, NumPy can)."""
    interface = np.frombuffer(message, np.uint8).__array_interface__
    return int(interface["data"][0])
