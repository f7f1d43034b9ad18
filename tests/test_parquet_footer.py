"""The column chunks' byte ranges, read from a Parquet footer without pyarrow (`parquet_footer`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioloader._sources.parquet_footer import chunk_spans, read_chunk_spans
from aioloader._sources.storage.blobs import LocalBlob


def write(path: Path, row_group_size: int = 70, **options: object) -> Path:
    ids = np.arange(300)
    table = pa.table(
        {
            "id": ids,
            "name": [f"row {i % 7}" for i in ids],  # dictionary-encoded
            "tokens": pa.array([list(range(i % 4)) for i in ids], pa.list_(pa.int32())),
            "point": pa.array([{"x": int(i), "y": float(i)} for i in ids]),
            "maybe": pa.array([None if i % 3 else int(i) for i in ids], pa.int16()),
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size, **options)
    return path


def pyarrow_spans(path: Path) -> list[list[tuple[str, int, int]]]:
    metadata = pq.read_metadata(path)
    groups = []
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        chunks = []
        for c in range(group.num_columns):
            chunk = group.column(c)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            chunks.append((chunk.path_in_schema.split(".")[0], start, start + chunk.total_compressed_size))
        groups.append(chunks)
    return groups


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"use_dictionary": False, "compression": "none"},
        {"write_page_checksum": True, "compression": "zstd"},
    ],
    ids=["default", "plain", "checksums"],
)
def test_the_ranges_are_pyarrows(tmp_path: Path, options: dict[str, object]) -> None:
    path = write(tmp_path / "rows.parquet", **options)
    blob = LocalBlob(str(path))
    try:
        assert read_chunk_spans(blob) == pyarrow_spans(path)
    finally:
        blob.close()


def test_a_changed_bit_in_the_footer_parses_or_is_a_value_error(tmp_path: Path) -> None:
    whole = write(tmp_path / "rows.parquet", 150, write_page_checksum=True).read_bytes()
    length = int.from_bytes(whole[-8:-4], "little")
    footer = whole[-8 - length : -8]
    parsed, messages = 0, []
    for offset in range(len(footer)):
        damaged = bytearray(footer)
        damaged[offset] ^= 1 << (offset % 8)  # one bit; each bit position in turn
        try:
            chunk_spans(bytes(damaged))
        except ValueError as error:  # anything else fails the test
            messages.append(str(error))
        else:
            parsed += 1
    assert parsed > 0
    assert messages
    assert all("footer does not parse" in message for message in messages)


def test_a_file_that_is_not_parquet_is_a_value_error(tmp_path: Path) -> None:
    for data, message in [
        (b"", "magic"),
        (b"x" * 100, "magic"),
        (b"PAR1" + b"\xff\xff\xff\x7fPAR1", "footer length"),
    ]:
        path = tmp_path / "not.parquet"
        path.write_bytes(data)
        blob = LocalBlob(str(path))
        try:
            with pytest.raises(ValueError, match=message):
                read_chunk_spans(blob)
        finally:
            blob.close()
