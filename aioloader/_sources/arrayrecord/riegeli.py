"""The Riegeli/records format, as far as ArrayRecord files use it.

A Riegeli file is a sequence of chunks, interrupted at every multiple of
64 KiB by a 24-byte block header, which may fall anywhere, even inside a
chunk header. A chunk is a 40-byte header (hash, `data_size`, data hash,
`chunk_type`, `num_records`, `decoded_data_size`, little-endian) followed by
its data. A simple chunk (type 'r') holds a compression byte, the length of
the compressed record sizes, the compressed sizes (`num_records` varints),
then the compressed values; each compressed block starts with its
decompressed size as a varint. The specification is Riegeli's
`riegeli_records_file_format.md`.

Every block header, chunk header and chunk data carries a HighwayHash of
itself (`highwayhash`); `checksum_problems` verifies them, for many chunks
at once, before anything is decoded. Every size and count is checked as
well, so that a file read without verification is still never decoded past
its bounds.
"""

from __future__ import annotations

import struct
from array import array

import numpy as np

from aioloader._sources.arrayrecord.compression import NONE, decompressor
from aioloader._sources.arrayrecord.highwayhash import hash64_many
from aioloader._sources.arrayrecord.wire import read_varint, read_varints

BLOCK_SIZE = 1 << 16
BLOCK_HEADER_SIZE = 24
CHUNK_HEADER_SIZE = 40
USABLE_BLOCK_SIZE = BLOCK_SIZE - BLOCK_HEADER_SIZE

SIMPLE_CHUNK = ord("r")

# A block header then the signature chunk's header: the first 64 bytes of every Riegeli file.
FILE_SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f0000000000000000400000000000000091bac23c9287e1a9"
    "0000000000000000e19f13c0e9b1c37273000000000000000000000000000000"
)

_CHUNK_HEADER = struct.Struct("<QQQQQ")
_DECODE_IN_PYTHON_UP_TO = 32  # records per chunk


class FormatError(ValueError):
    """Bytes that are not what the Riegeli or ArrayRecord format says they should be."""


class ChunkHeader:
    """The fields of a chunk header, and the 32 bytes its `header_hash` covers."""

    __slots__ = (
        "chunk_type",
        "data_hash",
        "data_size",
        "decoded_data_size",
        "hashed",
        "header_hash",
        "num_records",
    )

    def __init__(self, raw: bytes | memoryview) -> None:
        if len(raw) < CHUNK_HEADER_SIZE:
            raise FormatError(f"a chunk header is cut short ({len(raw)} of {CHUNK_HEADER_SIZE} bytes)")
        fields = _CHUNK_HEADER.unpack_from(raw)
        self.header_hash, self.data_size, self.data_hash, type_and_count, self.decoded_data_size = fields
        # `chunk_type` is one byte and `num_records` the seven after it.
        self.chunk_type, self.num_records = type_and_count & 0xFF, type_and_count >> 8
        self.hashed = bytes(raw[8:CHUNK_HEADER_SIZE])


class Chunk:
    """A chunk as read from the file at `position`, its block headers taken out.

    Nothing in it is trusted yet: `checksum_problems` verifies it, and
    `data` is cut to the header's `data_size` or to what the file holds.
    """

    __slots__ = ("block_headers", "data", "header", "position")

    def __init__(self, raw: bytes, position: int) -> None:
        self.position = position
        payload, self.block_headers = _take_block_headers(raw, position)
        self.header = ChunkHeader(payload)
        self.data = memoryview(payload)[CHUNK_HEADER_SIZE : CHUNK_HEADER_SIZE + self.header.data_size]

    def require_whole(self) -> None:
        """Raise FormatError if the file ends (or the next chunk begins) inside the data."""
        if len(self.data) != self.header.data_size:
            raise FormatError(f"chunk data is cut short ({len(self.data)} of {self.header.data_size} bytes)")

    def checks(self) -> list[tuple[str, bytes | memoryview, int]]:
        """(what, hashed bytes, expected hash) for every hash in the chunk, in the order to report them.

        A damaged header comes first: its sizes decide where the data is cut.
        """
        checks: list[tuple[str, bytes | memoryview, int]] = [
            (f"the block header at byte {offset}", header[8:], int.from_bytes(header[:8], "little"))
            for offset, header in self.block_headers
        ]
        checks.append(
            (f"the chunk header at byte {self.position}", self.header.hashed, self.header.header_hash)
        )
        begin = self.position + physical_size(self.position, CHUNK_HEADER_SIZE)
        end = self.position + physical_size(self.position, CHUNK_HEADER_SIZE + len(self.data))
        checks.append((f"the chunk data (bytes {begin} to {end})", self.data, self.header.data_hash))
        return checks


def checksum_problems(chunks: list[Chunk]) -> list[str | None]:
    """For each chunk, the first of its parts whose HighwayHash does not match, or None.

    All the hashes of all the chunks are computed together (see `highwayhash`).
    """
    checks = [chunk.checks() for chunk in chunks]
    hashes = iter(hash64_many([hashed for each in checks for _, hashed, _ in each]))
    problems: list[str | None] = []
    for each in checks:
        matches = [next(hashes) == expected for _, _, expected in each]
        bad = [what for (what, _, _), match in zip(each, matches, strict=True) if not match]
        problems.append(f"{bad[0]} does not match its hash" if bad else None)
    return problems


class Records:
    """The records of one decoded simple chunk: `values` cut at `bounds`.

    Immutable once made, so any number of threads may read it.
    """

    __slots__ = ("bounds", "values")

    def __init__(self, values: bytes, bounds: array[int]) -> None:
        self.values, self.bounds = values, bounds

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, i: int) -> bytes:
        return self.values[self.bounds[i] : self.bounds[i + 1]]

    def pick(self, offsets: list[int]) -> list[bytes]:
        """The records at `offsets`, in that order."""
        values, bounds = self.values, self.bounds
        return [values[bounds[i] : bounds[i + 1]] for i in offsets]

    @property
    def nbytes(self) -> int:
        """Memory held, for the chunk cache's bound."""
        return len(self.values) + self.bounds.itemsize * len(self.bounds)


def physical_size(position: int, size: int) -> int:
    """File bytes taken by `size` chunk bytes that start at `position`, block headers included."""
    overhead_blocks = (size + (position + USABLE_BLOCK_SIZE - 1) % BLOCK_SIZE) // USABLE_BLOCK_SIZE
    return size + overhead_blocks * BLOCK_HEADER_SIZE


def _take_block_headers(raw: bytes, position: int) -> tuple[bytes, list[tuple[int, bytes]]]:
    """`raw`, read from file offset `position`, less the block headers inside it; and those
    headers, with their file offsets.

    A block header at `position` itself belongs to the chunk starting there
    (a chunk that starts on a block boundary starts before its header).
    """
    boundary = -(-position // BLOCK_SIZE) * BLOCK_SIZE  # the first one at or after `position`
    stop = position + len(raw)
    if boundary >= stop:
        return raw, []
    view, parts, headers, cut = memoryview(raw), [], [], 0
    while boundary < stop:
        parts.append(view[cut : boundary - position])
        cut = boundary - position + BLOCK_HEADER_SIZE
        headers.append((boundary, bytes(view[boundary - position : cut])))
        boundary += BLOCK_SIZE
    parts.append(view[cut:])
    return b"".join(parts), headers


def decode_simple_chunk(chunk: Chunk, where: str) -> Records:
    """The records of a simple chunk, checked against the sizes its header gives."""
    chunk.require_whole()
    header, data = chunk.header, chunk.data
    if header.chunk_type != SIMPLE_CHUNK:
        transposed = (
            " (written with the 'transpose' option, not supported)" if header.chunk_type == 0x74 else ""
        )
        raise FormatError(
            f"expected a simple chunk (type 'r'), got type {header.chunk_type:#04x}{transposed}"
        )
    if not data:
        raise FormatError("a simple chunk has no data")
    compression = data[0]
    sizes_length, start = read_varint(data, 1)
    if start + sizes_length > len(data):
        raise FormatError("the record sizes run past the end of the chunk")
    sizes_end = start + sizes_length
    sizes = _decompress(compression, data[start:sizes_end], 10 * header.num_records, where)
    bounds = _bounds(sizes, header.num_records)
    values = _decompress(compression, data[sizes_end:], header.decoded_data_size, where)
    if len(values) != header.decoded_data_size or bounds[-1] != len(values):
        raise FormatError(
            f"the records add up to {bounds[-1]} bytes and the values to {len(values)}, "
            f"but the chunk header says {header.decoded_data_size}"
        )
    return Records(values, bounds)


def _bounds(sizes: bytes, count: int) -> array[int]:
    """Where each of `count` records starts in the values, then where the last one ends."""
    if count > _DECODE_IN_PYTHON_UP_TO:
        ends = np.cumsum(read_varints(sizes, count))
        return array("q", np.concatenate(([0], ends)).astype(np.int64).tobytes())
    # numpy's fixed cost per call (tens of microseconds) would dwarf a small
    # chunk: Grain's layout has one record per chunk.
    bounds, pos = array("q", [0]), 0
    for _ in range(count):
        size, pos = read_varint(sizes, pos)
        bounds.append(bounds[-1] + size)
    if pos != len(sizes):
        raise FormatError(f"{len(sizes) - pos} bytes follow the {count} record sizes")
    return bounds


def _decompress(compression: int, block: memoryview, limit: int, where: str) -> bytes:
    """The bytes of `block`, which may not decompress to more than `limit` bytes."""
    if compression == NONE:
        return bytes(block)
    size, start = read_varint(block, 0)
    if size > limit:  # checked first: a damaged size must not allocate gigabytes
        raise FormatError(f"a block claims to decompress to {size} bytes, more than the {limit} expected")
    decompress = decompressor(compression, where)
    try:
        values = decompress(block[start:], size)
    except Exception as error:  # each codec has its own error types
        raise FormatError(f"a block does not decompress ({type(error).__name__}: {error})") from error
    if len(values) != size:
        raise FormatError(f"a block decompressed to {len(values)} bytes instead of {size}")
    return bytes(values)
