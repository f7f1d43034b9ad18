"""`TFRecordIterDataset(path)`: the records of a TFRecord file, as bytes, in order
(Grain's `grain.experimental.TFRecordIterDataset`).

A TFRecord file is a sequence of records, each framed as: the data's length (8 bytes,
little-endian), the masked CRC-32C of those 8 bytes (4), the data, the masked CRC-32C
of the data (4). The records come as `bytes`, one by one, in the consumer's iterator
(parse them with a `map` after it); the state is the offset of the next record, so a
resumed run continues with it.

Deliberate differences from Grain, whose reader checks no checksum:

* both checksums of every record are verified (with the `crc32c` package, the
  `tfrecord` extra, at memory speed; without it, in plain Python, about 10 MB/s, and
  a WARNING says so), and a damaged or truncated file is a ValueError naming it, the
  record's number and its offset, never bytes of another record.
  `verify_checksums=False` skips the data's checksum for storage you trust (the
  length's, 8 bytes, is still verified: a truncated or foreign file is still an error);
* `path` must be a local path (a str or os.PathLike, not empty, without a NUL byte) of
  a regular file: a pipe or a device is refused, as a resumed run must seek in it. The
  file is opened at the first element, as Grain opens it, so a missing one is a
  FileNotFoundError then;
* a state resumes only in a dataset of a file of the same name, at the offset of one of
  its records (or its end); it holds the record's number too, for messages.
"""

from __future__ import annotations

import os
import struct
import threading
from typing import IO, Any

from aioloader._common.validation import require_bool
from aioloader._dataset.iter_base import IterDataset
from aioloader._dataset.stages import Plan, Settings, Stage, check_setup, require_count, state_fields
from aioloader._sources.crc32c import crc32c_small, masked_crc32c
from aioloader._sources.paths import regular_file_opener, require_path

_HEADER = struct.Struct("<QI")  # the data's length, and its masked checksum


class TFRecordIterDataset(IterDataset[bytes]):
    """The records of the TFRecord file at `path`, as bytes, in order."""

    def __init__(self, path: str | os.PathLike[str], *, verify_checksums: bool = True) -> None:
        super().__init__()
        self._verify = require_bool("verify_checksums", verify_checksums)
        self._path = require_path("path", path)
        if not self._path:
            raise ValueError("`path` is empty; it must name a TFRecord file.")

    def _plan(self, settings: Settings) -> Plan:
        return TFRecordStage(self._path, self._verify)

    def __repr__(self) -> str:
        return f"TFRecordIterDataset({self._path!r}, verify_checksums={self._verify})"


class TFRecordStage(Stage[bytes]):
    """One file read in order. Opened at the first `next()` or `set_state()`; `close()`
    (from any thread) closes it between two records, never under a read."""

    def __init__(self, path: str, verify: bool) -> None:
        super().__init__()
        self._path, self._verify = path, verify
        self._file: IO[bytes] | None = None
        self._offset = 0  # of the next record
        self._size = 0  # of the file, when last asked (see `_check_fits`)
        self._number: int | None = 0  # records before it, for messages (None: a state did not say)
        self._lock = threading.Lock()
        self._closed = False

    def __next__(self) -> bytes:
        with self._lock:
            if self._closed:
                raise StopIteration
            file = self._open()
            header = file.read(_HEADER.size)
            if not header:
                raise StopIteration
            length = self._length(header)
            self._check_fits(file, length)
            body = file.read(length + 4)
            if len(body) != length + 4:
                raise self._damaged(f"ends inside it ({len(body)} of its {length + 4} bytes are there)")
            data = body[:length]
            if self._verify and masked_crc32c(data) != int.from_bytes(body[length:], "little"):
                raise self._damaged("does not match its checksum")
            self._offset += _HEADER.size + length + 4
            if self._number is not None:
                self._number += 1
            return data

    def _length(self, header: bytes) -> int:
        if len(header) != _HEADER.size:
            raise self._damaged(f"ends inside its header ({len(header)} of {_HEADER.size} bytes)")
        length = _header_length(header)
        if length is None:
            raise self._damaged("has a length that does not match its checksum (not a TFRecord file?)")
        return length

    def _check_fits(self, file: IO[bytes], length: int) -> None:
        """The file's end before the record's: a truncated file, or a damaged length with a
        matching checksum (1 in 2**32 by chance, or written so), which `read` must not be
        asked to allocate (2**63 bytes overflow; 20 GB may be granted, then filled in part).
        The size is asked of the file again only when a record seems not to fit: a file
        still being written may have grown, and one `fstat` a record would cost small ones."""
        end = self._offset + _HEADER.size + length + 4
        if end > self._size:
            self._size = os.fstat(file.fileno()).st_size
        if end > self._size:
            left = max(0, self._size - self._offset - _HEADER.size)
            raise self._damaged(f"ends inside it ({left} of its {length + 4} bytes are there)")

    def _damaged(self, what: str) -> ValueError:
        record = "a record" if self._number is None else f"record {self._number}"
        return ValueError(
            f"TFRecord file {self._path!r} is damaged: {record} (at byte {self._offset}) {what}."
        )

    def _open(self) -> IO[bytes]:
        if self._file is None:
            self._file = _open_regular(self._path)
            self._file.seek(self._offset)
        return self._file

    def snapshot(self) -> tuple[int, int | None]:
        return self._offset, self._number

    def state_of(self, token: tuple[int, int | None]) -> dict[str, Any]:
        offset, number = token
        return {
            "stage": "tfrecord",
            "offset": offset,
            "record": number,
            "setup": os.path.basename(self._path),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        (offset,) = state_fields(state, "tfrecord", ("offset",))
        check_setup(state, os.path.basename(self._path))
        offset = require_count("offset", offset)
        # A state saved before states held the record's number resumes without it.
        number = state.get("record")
        number = None if number is None else require_count("record", number)
        with self._lock:
            file = self._open()
            self._check_starts_record(file, offset)
            self._offset, self._number = offset, number
            file.seek(offset)

    def _check_starts_record(self, file: IO[bytes], offset: int) -> None:
        """A state's offset must be where a record starts (its header's checksum holds), or
        the file's end: else the run would resume inside a record, and fail there blaming
        the file, or worse, read a record's bytes as a frame."""
        self._size = os.fstat(file.fileno()).st_size
        if offset > self._size:
            raise ValueError(
                f"`state` has offset={offset}, past the end of {self._path!r} ({self._size} bytes)."
            )
        if offset == self._size:
            return
        file.seek(offset)
        header = file.read(_HEADER.size)
        if len(header) != _HEADER.size or _header_length(header) is None:
            raise ValueError(
                f"`state` has offset={offset}, where no record of {self._path!r} starts "
                "(a state of another file of the same name, or one changed by hand?)."
            )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()


def _header_length(header: bytes) -> int | None:
    """The length a record's 12-byte header gives, or None if it fails its checksum."""
    length, checksum = _HEADER.unpack(header)
    return int(length) if masked_crc32c(header[:8], crc32c_small) == checksum else None


def _open_regular(path: str) -> IO[bytes]:
    """`path` opened for reading, if it is a regular file: a pipe cannot seek (to resume)
    and tells no size (to check a record's length against)."""
    try:
        return open(path, "rb", opener=regular_file_opener)
    except (ValueError, IsADirectoryError):
        raise ValueError(
            f"TFRecord file {path!r} is not a regular file (a pipe, a device or a folder?)."
        ) from None
