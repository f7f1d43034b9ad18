"""One ArrayRecord file, read by aioloader's own reader (no `array_record` package needed).

An ArrayRecord file is a Riegeli file (see `_riegeli`) laid out for random
access (ArrayRecord's `layout.proto`):

* its last 64 KiB block holds the postscript, an uncompressed simple chunk
  of three copies of `RiegeliPostscript{footer_offset, magic}`;
* the footer chunk at `footer_offset` holds a `RiegeliFooterMetadata`
  record (version, number of chunks, number of records), then one
  `ArrayRecordFooter{chunk_offset, decoded_data_size, num_records}` per
  data chunk, in order.

Chunk `i` spans the file from its offset to the next chunk's (or the
footer's), so one positional read fetches it whole.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from aioloader._sources.arrayrecord.compression import NONE
from aioloader._sources.arrayrecord.riegeli import (
    BLOCK_SIZE,
    FILE_SIGNATURE,
    FormatError,
    Records,
    decode_simple_chunk,
    split_chunk,
    without_block_headers,
)
from aioloader._sources.arrayrecord.wire import proto_fields, read_varints
from aioloader._sources.cache import ByteBoundedCache
from aioloader._sources.keys import KeyIndex, read_grouped
from aioloader._sources.storage.blobs import Blob

MAGIC = 0x71930E704FDAE05E
VERSION = 1


class ArrayRecordFile:
    """The records of one ArrayRecord file, by position.

    The constructor reads and checks the postscript and the footer; each
    chunk's header is checked against its footer entry when it is read.
    Thread-safe: reads are range reads of `blob` (a local file or a stored
    object), and decoded chunks of more than one record go through `cache`,
    which the files of a data source share.
    """

    def __init__(self, blob: Blob, cache: ByteBoundedCache[Records]) -> None:
        self.path, self._blob, self._cache = blob.name, blob, cache
        try:
            self._size = blob.size
            footer_offset = self._read_postscript()
            self._offsets, self._sizes, counts = self._read_footer(footer_offset)
        except ValueError as error:  # FormatError, or a malformed varint
            self.close()
            raise FormatError(f"`{self.path}` is not a valid ArrayRecord file: {error}.") from None
        except BaseException:
            self.close()
            raise
        self._ends = np.append(self._offsets[1:], footer_offset)
        self.index = KeyIndex(counts)
        self.num_records = self.index.total

    def read_one(self, position: int) -> bytes:
        """The record at `position` (an int in `[0, num_records)`)."""
        chunk, offset = self.index.locate(position)
        return self._chunk(chunk)[offset]

    def read(self, positions: list[int], fetched: Mapping[int, bytes] | None = None) -> list[bytes]:
        """The records at `positions`, decoding each chunk they touch once; `fetched` holds
        chunks already read (from `spans`), by chunk number."""
        chunks, offsets = self.index.locate_many(positions)
        return read_grouped(chunks, offsets, lambda chunk, at: self._chunk(chunk, fetched).pick(at))

    def spans(self, positions: list[int]) -> list[tuple[int, Blob, int, int]]:
        """What to fetch before `read(positions)`: (chunk, blob, start, end) of each chunk it
        needs that is not in the cache."""
        chunks, _ = self.index.locate_many(positions)
        wanted = [int(i) for i in np.unique(chunks)]
        cached = self._cache.contains
        return [
            (i, self._blob, int(self._offsets[i]), int(self._ends[i]))
            for i in wanted
            if self.index.counts[i] == 1 or not cached((self.path, i))
        ]

    def close(self) -> None:
        """Close the file (idempotent); reading afterwards raises ValueError."""
        self._blob.close()

    def _chunk(self, i: int, fetched: Mapping[int, bytes] | None = None) -> Records:
        raw = fetched.get(i) if fetched else None
        # Under random access a one-record chunk is read once per epoch:
        # caching it would only push out chunks that will be read again.
        if self.index.counts[i] == 1:
            return self._decode(i, raw)
        return self._cache.get((self.path, i), lambda: self._decode(i, raw))

    def _decode(self, i: int, raw: bytes | None = None) -> Records:
        if self._blob.closed:
            raise ValueError(f"`{self.path}` was closed.")
        begin, end = int(self._offsets[i]), int(self._ends[i])
        try:
            raw = self._pread(begin, end - begin) if raw is None else _whole(raw, begin, end - begin)
            header, data = split_chunk(without_block_headers(raw, begin))
            expected = (int(self.index.counts[i]), int(self._sizes[i]))
            if (header.num_records, header.decoded_data_size) != expected:
                raise FormatError(
                    f"the chunk holds {header.num_records} records of {header.decoded_data_size} bytes, "
                    f"but the footer says {expected[0]} records of {expected[1]} bytes"
                )
            return decode_simple_chunk(header, data, f"`{self.path}`")
        except ValueError as error:  # FormatError, or malformed record sizes
            raise FormatError(f"`{self.path}`: chunk {i} at byte {begin} is damaged: {error}.") from None

    def _pread(self, offset: int, size: int) -> bytes:
        return _whole(self._blob.read(offset, size), offset, size)

    def _read_postscript(self) -> int:
        """The footer's offset, from the postscript in the last 64 KiB block."""
        if self._pread(0, min(self._size, len(FILE_SIGNATURE))) != FILE_SIGNATURE:
            raise FormatError("it does not start with the Riegeli file signature")
        if self._size < 2 * BLOCK_SIZE or self._size % BLOCK_SIZE:
            raise FormatError(
                f"its size, {self._size} bytes, is not two or more whole 64 KiB blocks (truncated?)"
            )
        begin = self._size - BLOCK_SIZE
        block = self._pread(begin, BLOCK_SIZE)
        if int.from_bytes(block[8:16], "little") != 0:  # the block header's `previous_chunk`
            raise FormatError(
                "its last 64 KiB block does not start a chunk, so holds no postscript (truncated?)"
            )
        try:
            header, data = split_chunk(without_block_headers(block, begin))
            if data[:1] != bytes([NONE]):
                raise FormatError("the postscript is compressed")
            copies = decode_simple_chunk(header, data, "")
            fields = dict(proto_fields(copies[0])) if len(copies) else {}
        except ValueError as error:
            raise FormatError(f"its last 64 KiB block holds no postscript ({error}; truncated?)") from None
        if fields.get(2) != MAGIC or not isinstance(fields.get(1), int):
            raise FormatError("its last 64 KiB block holds no ArrayRecord postscript (truncated?)")
        footer_offset = int(fields[1])
        if not len(FILE_SIGNATURE) <= footer_offset < begin:
            raise FormatError(f"the postscript points to a footer at byte {footer_offset}, outside the file")
        return footer_offset

    def _read_footer(self, footer_offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each chunk's offset, decoded size and record count, checked against the metadata."""
        begin, end = footer_offset, self._size - BLOCK_SIZE
        header, data = split_chunk(without_block_headers(self._pread(begin, end - begin), begin))
        records = decode_simple_chunk(header, data, f"`{self.path}`")
        if len(records) == 0:
            raise FormatError("the footer is empty")
        version, num_chunks, num_records = _footer_metadata(records[0])
        if version != VERSION:
            raise FormatError(f"the footer has ArrayRecord version {version}, expected {VERSION}")
        if len(records) - 1 != num_chunks:
            raise FormatError(f"the footer lists {len(records) - 1} chunks, its metadata {num_chunks}")
        entries = _footer_entries(records)
        offsets, sizes, counts = entries[:, 0], entries[:, 1], entries[:, 2]
        if int(counts.sum()) != num_records:
            raise FormatError(f"the chunks hold {int(counts.sum())} records, the footer says {num_records}")
        in_order = np.all(np.diff(offsets) > 0) and (not len(offsets) or offsets[0] >= len(FILE_SIGNATURE))
        if not in_order or (len(offsets) and offsets[-1] >= footer_offset):
            raise FormatError("the footer's chunk offsets are not increasing offsets before the footer")
        return offsets, sizes, counts


def _whole(data: bytes, offset: int, size: int) -> bytes:
    """`data`, read at `offset`, if it is all `size` bytes asked for (a file that ends early is damaged)."""
    if len(data) != size:
        raise FormatError(f"expected {size} bytes at byte {offset}, the file ends after {len(data)}")
    return data


def _footer_metadata(record: bytes) -> tuple[int, int, int]:
    """(version, num_chunks, num_records) from a `RiegeliFooterMetadata` record."""
    nested = [value for number, value in proto_fields(record) if number == 1 and isinstance(value, bytes)]
    if not nested:
        raise FormatError("the footer has no ArrayRecord metadata")
    fields = dict(proto_fields(nested[-1]))
    values = (fields.get(1, 0), fields.get(2, 0), fields.get(3, 0))
    if not all(isinstance(v, int) for v in values):
        raise FormatError("the footer metadata is malformed")
    return values  # type: ignore[return-value]


def _footer_entries(records: Records) -> np.ndarray:
    """An (n, 3) array of (chunk_offset, decoded_data_size, num_records), one row per chunk.

    The writer puts the three fields in order in every entry, so the entries
    are a flat run of (tag, value) varints, decoded at once; a footer laid
    out otherwise is parsed field by field.
    """
    n = len(records) - 1
    body = memoryview(records.values)[records.bounds[1] :]
    try:
        rows = read_varints(body, 6 * n).reshape(n, 6)
        if np.all(rows[:, 0::2] == (8, 16, 24)):
            return rows[:, 1::2]
    except ValueError:
        pass
    entries = np.zeros((n, 3), dtype=np.int64)
    for row in range(n):
        fields = dict(proto_fields(records[row + 1]))
        if not isinstance(fields.get(1), int):
            raise FormatError(f"footer entry {row} has no chunk offset")
        entries[row] = [fields.get(1, 0), fields.get(2, 0), fields.get(3, 0)]
    return entries
