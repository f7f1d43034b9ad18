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
footer's), so one range read fetches it whole, from a local file or a stored
object alike (a `Blob`). The chunks a read needs are fetched (a stored
object's all at once, or beforehand with those of other files: see
`spans`), then verified together (their HighwayHashes, see `riegeli`),
then decoded: nothing unverified is decoded, and a damaged chunk is an
error naming the file, the chunk, its records and the offset of the part
that does not match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from aioloader._sources.arrayrecord.compression import NONE
from aioloader._sources.arrayrecord.riegeli import (
    BLOCK_SIZE,
    FILE_SIGNATURE,
    Chunk,
    FormatError,
    Records,
    checksum_problems,
    decode_simple_chunk,
)
from aioloader._sources.arrayrecord.wire import proto_fields, read_varints
from aioloader._sources.cache import ByteBoundedCache
from aioloader._sources.keys import KeyIndex, distinct, read_grouped
from aioloader._sources.storage.blobs import Blob, read_spans

T = TypeVar("T")

MAGIC = 0x71930E704FDAE05E
VERSION = 1


class ArrayRecordFile:
    """The records of one ArrayRecord file, by position.

    The constructor reads and checks the postscript and the footer; each
    chunk's header is checked against its footer entry when it is read.
    With `verify_checksums`, every hash the format defines is verified
    before the bytes it covers are used, whether they come from a local
    file or a stored object; every message names `blob.name`, the path or
    the URL. Thread-safe: reads are range reads of `blob`, and decoded
    chunks of more than one record go through `cache`, which the files of a
    data source share.
    """

    def __init__(
        self, blob: Blob, cache: ByteBoundedCache[Records], *, verify_checksums: bool = True
    ) -> None:
        self.path, self._blob, self._cache, self._verify = blob.name, blob, cache, verify_checksums
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
        return self._chunks([chunk], {})[chunk][offset]

    def read(self, positions: list[int], fetched: Mapping[int, bytes] | None = None) -> list[bytes]:
        """The records at `positions`, decoding each chunk they touch once. `fetched` holds the
        bytes of chunks already read (see `spans`), by chunk number; they are verified as if
        read here."""
        chunks, offsets = self.index.locate_many(positions)
        decoded = self._chunks(distinct(chunks), fetched or {})
        return read_grouped(chunks, offsets, lambda chunk, at: decoded[chunk].pick(at))

    def spans(self, positions: list[int]) -> list[tuple[int, Blob, int, int]]:
        """What `read(positions)` would fetch: (chunk, blob, start, end) of each chunk it needs
        that the cache lacks now, so that a caller can fetch those of many files at once."""
        chunks, _ = self.index.locate_many(positions)
        needed = [i for i in distinct(chunks) if not self._held(i)]
        return [(i, self._blob, *self._span(i)) for i in needed]

    def close(self) -> None:
        """Close the file (idempotent); reading afterwards raises ValueError."""
        self._blob.close()

    def _chunks(self, wanted: list[int], fetched: Mapping[int, bytes]) -> dict[int, Records]:
        """The decoded chunks `wanted`: from the cache, or fetched (or read now), verified and decoded."""
        found: dict[int, Records] = {}
        for i in wanted:
            cached = self._cache.lookup(self._key(i)) if self._cacheable(i) else None
            if cached is not None:
                found[i] = cached
        missing = [i for i in wanted if i not in found]
        for i, records in zip(missing, self._decode(missing, fetched), strict=True):
            found[i] = records
            if self._cacheable(i):
                self._cache.put(self._key(i), records)
        return found

    def _cacheable(self, i: int) -> bool:
        # Under random access a one-record chunk is read once per epoch:
        # caching it would only push out chunks that will be read again.
        return bool(self.index.counts[i] > 1)

    def _held(self, i: int) -> bool:
        """Whether the cache holds chunk `i` now (it may leave at any time; nothing is counted)."""
        return self._cacheable(i) and self._cache.contains(self._key(i))

    def _key(self, i: int) -> tuple[str, int]:
        return (self.path, i)

    def _span(self, i: int) -> tuple[int, int]:
        """Where chunk `i` starts and ends in the file."""
        return int(self._offsets[i]), int(self._ends[i])

    def _decode(self, wanted: list[int], fetched: Mapping[int, bytes]) -> list[Records]:
        """Read the chunks `wanted` (those not in `fetched`), verify them all, then decode them."""
        if not wanted:
            return []
        if self._blob.closed:
            raise ValueError(f"`{self.path}` was closed.")
        spans = [self._span(i) for i in wanted]
        try:
            raws = self._read_spans(wanted, spans, fetched)
        except FormatError as error:  # the file shrank since it was opened
            raise FormatError(f"`{self.path}`: {error}.") from None
        pairs = list(zip(wanted, raws, spans, strict=True))
        chunks = [self._naming(i, Chunk, raw, begin) for i, raw, (begin, _) in pairs]
        if self._verify:
            for i, problem in zip(wanted, checksum_problems(chunks), strict=True):
                if problem is not None:
                    raise self._damaged(i, problem)
        return [
            self._naming(i, self._decode_chunk, i, chunk) for i, chunk in zip(wanted, chunks, strict=True)
        ]

    def _naming(self, i: int, make: Callable[..., T], *args: Any) -> T:
        """`make(*args)`; a ValueError it raises (FormatError, or bad sizes) comes back naming chunk `i`."""
        try:
            return make(*args)
        except ValueError as error:
            raise self._damaged(i, str(error)) from None

    def _damaged(self, i: int, problem: str) -> FormatError:
        first, last = int(self.index.starts[i]), int(self.index.starts[i + 1]) - 1
        records = f"record {first}" if first == last else f"records {first} to {last}"
        return FormatError(
            f"`{self.path}`: chunk {i} ({records}) at byte {int(self._offsets[i])} is damaged: {problem}."
        )

    def _decode_chunk(self, i: int, chunk: Chunk) -> Records:
        header, expected = chunk.header, (int(self.index.counts[i]), int(self._sizes[i]))
        if (header.num_records, header.decoded_data_size) != expected:
            raise FormatError(
                f"the chunk holds {header.num_records} records of {header.decoded_data_size} bytes, "
                f"but the footer says {expected[0]} records of {expected[1]} bytes"
            )
        return decode_simple_chunk(chunk, f"`{self.path}`")

    def _read_spans(
        self, wanted: list[int], spans: list[tuple[int, int]], fetched: Mapping[int, bytes]
    ) -> list[bytes]:
        """The bytes of each chunk `wanted` (at `spans`): from `fetched`, or read now (a stored
        object's ranges all at once); each must be whole."""
        unread = [(self._blob, *span) for i, span in zip(wanted, spans, strict=True) if i not in fetched]
        read = iter(read_spans(unread))
        raws = [fetched[i] if i in fetched else next(read) for i in wanted]
        return [_whole(raw, begin, end - begin) for raw, (begin, end) in zip(raws, spans, strict=True)]

    def _pread(self, offset: int, size: int) -> bytes:
        return _whole(self._blob.read(offset, size), offset, size)

    def _verified(self, raw: bytes, position: int) -> Chunk:
        """The chunk that starts `raw`, read at `position`; with verification on, its hashes match."""
        chunk = Chunk(raw, position)
        problem = checksum_problems([chunk])[0] if self._verify else None
        if problem is not None:
            raise FormatError(problem)
        return chunk

    def _read_postscript(self) -> int:
        """The footer's offset, from the postscript in the last 64 KiB block."""
        start = self._pread(0, min(self._size, len(FILE_SIGNATURE)))
        if start != FILE_SIGNATURE:
            where = next(
                (i for i, (a, b) in enumerate(zip(start, FILE_SIGNATURE, strict=False)) if a != b), len(start)
            )
            raise FormatError(f"it does not start with the Riegeli file signature (byte {where} differs)")
        if self._size < 2 * BLOCK_SIZE or self._size % BLOCK_SIZE:
            raise FormatError(
                f"its size, {self._size} bytes, is not two or more whole 64 KiB blocks (truncated?)"
            )
        begin = self._size - BLOCK_SIZE
        block = self._pread(begin, BLOCK_SIZE)
        if int.from_bytes(block[8:16], "little") != 0:  # the block header's `previous_chunk`
            raise FormatError(
                f"its last 64 KiB block (at byte {begin}) does not start a chunk, "
                "so holds no postscript (truncated?)"
            )
        chunk = self._verified(block, begin)
        try:
            if chunk.data[:1] != bytes([NONE]):
                raise FormatError("the postscript is compressed")
            copies = decode_simple_chunk(chunk, "")
            fields = dict(proto_fields(copies[0])) if len(copies) else {}
        except ValueError as error:
            raise FormatError(
                f"its last 64 KiB block (at byte {begin}) holds no postscript ({error}; truncated?)"
            ) from None
        if fields.get(2) != MAGIC or not isinstance(fields.get(1), int):
            raise FormatError(
                f"its last 64 KiB block (at byte {begin}) holds no ArrayRecord postscript (truncated?)"
            )
        footer_offset = int(fields[1])
        if not len(FILE_SIGNATURE) <= footer_offset < begin:
            raise FormatError(f"the postscript points to a footer at byte {footer_offset}, outside the file")
        return footer_offset

    def _read_footer(self, footer_offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each chunk's offset, decoded size and record count, checked against the metadata."""
        begin, end = footer_offset, self._size - BLOCK_SIZE
        chunk = self._verified(self._pread(begin, end - begin), begin)
        records = decode_simple_chunk(chunk, f"`{self.path}`")
        if len(records) == 0:
            raise FormatError(f"the footer at byte {footer_offset} is empty")
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
