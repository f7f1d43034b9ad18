"""The two integer encodings the storage formats share: varints and protobuf fields.

Riegeli prefixes compressed blocks and record sizes with varints (7 bits per
byte, little-endian, high bit set on every byte but the last), and
ArrayRecord's footer and postscript are small protobuf messages whose fields
are all varints. These helpers decode just that much, and raise ValueError
on bytes that do not hold what they should.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

_MAX_VARINT_BYTES = 10  # a 64-bit value needs at most ten 7-bit groups
_FIXED_WIDTH = {1: 8, 5: 4}  # protobuf wire types fixed64 and fixed32


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at `data[pos:]` and the position just after it."""
    value = shift = 0
    for end in range(pos, min(pos + _MAX_VARINT_BYTES, len(data))):
        byte = data[end]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, end + 1
        shift += 7
    raise ValueError(f"a varint at byte {pos} is cut short or longer than 10 bytes")


def read_varints(data: bytes | memoryview, count: int) -> np.ndarray:
    """Exactly `count` varints filling `data`, decoded at once as an int64 array.

    Vectorised because a chunk may hold tens of thousands of record sizes: a
    byte below 0x80 ends a varint, and each byte adds its low 7 bits shifted
    by 7 times its place within that varint.
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw < 0x80)
    if len(ends) != count or (count and ends[-1] != len(raw) - 1) or (not count and len(raw)):
        raise ValueError(f"expected {count} varints in {len(raw)} bytes, found {len(ends)} varint ends")
    if len(raw) == count:  # every value below 128: the common case for small records
        return raw.astype(np.int64)
    starts = np.concatenate(([0], ends[:-1] + 1))
    places = np.arange(len(raw)) - np.repeat(starts, ends - starts + 1)
    if places.max() >= _MAX_VARINT_BYTES - 1:
        raise ValueError("a varint does not fit in 63 bits")
    groups = (raw & 0x7F).astype(np.int64) << (7 * places)
    return np.add.reduceat(groups, starts)


def proto_fields(message: bytes | memoryview) -> Iterator[tuple[int, int | bytes]]:
    """The fields of a protobuf message in order: (number, int) for varints,
    (number, bytes) for length-delimited fields (strings, nested messages).

    Fixed-width fields are skipped; groups (deprecated) are an error.
    """
    pos = 0
    while pos < len(message):
        tag, pos = read_varint(message, pos)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, pos = read_varint(message, pos)
            yield number, value
        elif wire_type == 2:
            length, pos = read_varint(message, pos)
            if pos + length > len(message):
                raise ValueError(f"protobuf field {number} runs past the end of its message")
            yield number, bytes(message[pos : pos + length])
            pos += length
        elif wire_type in _FIXED_WIDTH:
            pos += _FIXED_WIDTH[wire_type]
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type} for field {number}")
    if pos != len(message):
        raise ValueError("a protobuf field runs past the end of its message")
