"""Where each column chunk of a Parquet file lies, read from the footer's bytes without pyarrow.

Fetching a row group's column chunks ahead of the decode needs their byte
ranges. pyarrow's `RowGroupMetaData.column(i)` checks a chunk's metadata in
C++ and, when a damaged footer fails that check, its exception crosses no
handler: the process aborts. (pyarrow's reader makes the same check behind
a handler, so decoding reports the damage as an error.) So the few fields
fetching needs are read here from the footer's Thrift (compact protocol),
and a footer that does not parse is a ValueError.
"""

from __future__ import annotations

from typing import Any

from aioloader._sources.storage.blobs import Blob

MAGIC = b"PAR1"
_TAIL = 64 << 10  # read with the footer's length, so that most footers take one request
_MAX_DEPTH = 32  # Parquet's own structs nest far less; a damaged footer could nest without end

# (first name of the column's path, start, end): one per column chunk, one list per row group.
ChunkSpans = list[list[tuple[str, int, int]]]


def read_chunk_spans(blob: Blob) -> ChunkSpans:
    """The column chunks of each row group of the Parquet file in `blob`."""
    tail = blob.read(max(0, blob.size - _TAIL), min(blob.size, _TAIL))
    if len(tail) < 12 or tail[-4:] != MAGIC:
        raise ValueError("it does not end with the Parquet magic bytes")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 12 > blob.size:
        raise ValueError(f"its footer length, {length} bytes, runs past the start of the file")
    footer = tail[-8 - length : -8] if length + 8 <= len(tail) else blob.read(blob.size - 8 - length, length)
    return chunk_spans(footer)


def chunk_spans(footer: bytes) -> ChunkSpans:
    """The column chunks of each row group listed in `footer` (a Thrift `FileMetaData`)."""
    try:
        metadata = _Compact(footer).struct()
        return [[_chunk(chunk) for chunk in group[1]] for group in metadata.get(4, [])]
    except (AttributeError, IndexError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise ValueError(f"its footer does not parse ({type(error).__name__}: {error})") from None


def _chunk(chunk: dict[int, Any]) -> tuple[str, int, int]:
    """A `ColumnChunk`'s first path name and byte range (from its dictionary page, if any)."""
    meta = chunk[3]
    name, size, data = meta[3][0].decode(), meta[7], meta[9]
    dictionary = meta.get(11)
    start = min(data, dictionary) if isinstance(dictionary, int) and dictionary > 0 else data
    if not all(isinstance(v, int) for v in (size, start)) or start < 0 or size < 0:
        raise TypeError(f"column chunk {name!r} has no valid offset and size")
    return name, start, start + size


class _Compact:
    """A reader of Thrift's compact protocol: structs as {field id: value}, lists as lists."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at, self._depth = data, 0, 0

    def struct(self) -> dict[int, Any]:
        self._depth += 1
        if self._depth > _MAX_DEPTH:
            raise TypeError(f"structs nested deeper than {_MAX_DEPTH}")
        fields, field = {}, 0
        while (header := self._byte()) != 0:
            delta, kind = header >> 4, header & 0x0F
            field = field + delta if delta else _unzigzag(self._varint())
            fields[field] = kind == 1 if kind in (1, 2) else self._value(kind)
        self._depth -= 1
        return fields

    def _value(self, kind: int) -> Any:
        if kind in (1, 2):  # a bool inside a list: a byte of its own
            return self._byte() == 1
        if kind == 3:
            return self._byte()
        if kind in (4, 5, 6):
            return _unzigzag(self._varint())
        if kind == 7:
            return self._take(8)
        if kind == 8:
            return self._take(self._varint())
        if kind in (9, 10):
            header = self._byte()
            size = header >> 4 if header >> 4 != 15 else self._varint()
            return [self._value(header & 0x0F) for _ in range(size)]
        if kind == 11:
            size = self._varint()
            kinds = self._byte() if size else 0
            return {self._value(kinds >> 4): self._value(kinds & 0x0F) for _ in range(size)}
        if kind == 12:
            return self.struct()
        raise TypeError(f"unknown Thrift type {kind} at byte {self._at}")

    def _byte(self) -> int:
        value = self._data[self._at]  # IndexError past the end
        self._at += 1
        return value

    def _take(self, size: int) -> bytes:
        if self._at + size > len(self._data):
            raise IndexError(f"{size} bytes at byte {self._at} run past the footer's end")
        self._at += size
        return self._data[self._at - size : self._at]

    def _varint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self._byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise TypeError(f"a varint longer than 64 bits at byte {self._at}")


def _unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)
