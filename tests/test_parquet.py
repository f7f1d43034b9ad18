"""ParquetDataSource: rows of files written by `pyarrow.parquet.write_table`, read by key."""

from __future__ import annotations

import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aioloader import DataLoader, IndexSampler, ParquetDataSource
from tests.conftest import repeated
from tests.support.reference import assert_same_outputs

ROW_GROUP = 37
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("score", pa.float32()),
        ("flag", pa.bool_()),
        ("name", pa.string()),
        ("blob", pa.binary()),
        ("tokens", pa.list_(pa.int32())),
        ("weights", pa.large_list(pa.float64())),
        ("maybe", pa.int16()),  # has nulls: numpy scalars and None
    ]
)


def make_rows(start: int, count: int) -> list[dict[str, Any]]:
    """The rows as a reader should return them (numpy scalars and arrays, str, bytes, None)."""
    return [
        {
            "id": np.int64(i),
            "score": np.float32(i / 4),
            "flag": np.bool_(i % 3 == 0),
            "name": f"row {i}",
            "blob": bytes([i % 256]) * (i % 5),
            "tokens": np.arange(i % 6, dtype=np.int32) + i,
            "weights": np.full(i % 3, i / 2, dtype=np.float64),
            "maybe": None if i % 4 == 0 else np.int16(i % 1000),
        }
        for i in range(start, start + count)
    ]


def write(path: Path, rows: list[dict[str, Any]], **options: Any) -> Path:
    columns = {name: [row[name] for row in rows] for name in SCHEMA.names}
    columns["tokens"] = [row["tokens"].tolist() for row in rows]
    columns["weights"] = [row["weights"].tolist() for row in rows]
    pq.write_table(pa.table(columns, schema=SCHEMA), path, row_group_size=ROW_GROUP, **options)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[dict[str, Any]]]:
    """Two files (200 and 90 rows, row groups of 37), and every row in order."""
    directory = tmp_path_factory.mktemp("parquet")
    first, second = make_rows(0, 200), make_rows(200, 90)
    paths = [write(directory / "a.parquet", first), write(directory / "b.parquet", second)]
    return paths, first + second


def test_rows_come_back_as_written(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    paths, rows = files
    source = ParquetDataSource(paths)
    assert len(source) == len(rows)
    assert_same_outputs([source[key] for key in range(len(source))], rows)
    assert_same_outputs(source.__getitems__(list(range(len(source)))), rows)
    row = source[5]
    assert type(row["id"]) is np.int64
    assert type(row["score"]) is np.float32
    assert type(row["flag"]) is np.bool_
    assert type(row["name"]) is str
    assert type(row["blob"]) is bytes
    assert row["tokens"].dtype == np.int32


def test_columns_select_and_order(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    paths, rows = files
    source = ParquetDataSource(paths, columns=["name", "id"])
    assert list(source[250]) == ["name", "id"]
    assert source[250] == {"name": rows[250]["name"], "id": rows[250]["id"]}


def test_arrays_are_fresh_copies(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    source = ParquetDataSource(files[0])
    source[7]["tokens"][:] = -1
    assert source[7]["tokens"].tolist() == list(range(7, 8))


@pytest.mark.parametrize("workers", [0, 2, 4])
def test_the_loader_reads_every_row(files: tuple[list[Path], list[dict[str, Any]]], workers: int) -> None:
    paths, rows = files
    sampler = IndexSampler(len(rows), shuffle=True, num_epochs=2, seed=9)
    loader = DataLoader(
        data_source=ParquetDataSource(paths, cache_bytes=30_000), sampler=sampler, worker_count=workers
    )
    wanted = [rows[key] for key in sampler.record_keys(0, 2 * len(rows))]
    assert_same_outputs(list(loader), wanted)


def test_getitems_decodes_each_row_group_once(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    paths, rows = files
    source = ParquetDataSource(paths)
    keys = [0, 40, 1, 200, 36, 41, 201]  # row groups 0 and 1 of the first file, 0 of the second
    assert_same_outputs(source.__getitems__(keys), [rows[key] for key in keys])
    assert source.cache_statistics()[3:] == (0, 3)  # hits, misses: one decode per row group
    source.__getitems__(keys)
    assert source.cache_statistics()[3:] == (3, 3)


def test_without_a_cache_each_call_decodes_again(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    source = ParquetDataSource(files[0], cache_bytes=0)
    source.__getitems__([0, 1, 2])
    source.__getitems__([0, 1, 2])
    assert source.cache_statistics()[:2] == (0, 0)
    assert source.cache_statistics().misses == 2


def test_the_row_group_cache_stays_within_its_bound(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    paths, rows = files
    one_group = ParquetDataSource(paths)
    one_group[0]
    bound = int(2.5 * one_group.cache_statistics().nbytes)  # room for two row groups
    source = ParquetDataSource(paths, cache_bytes=bound)
    for key in random.Random(2).sample(range(len(rows)), len(rows)):
        assert_same_outputs([source[key]], [rows[key]])
        statistics = source.cache_statistics()
        assert statistics.nbytes <= bound
    assert 1 <= statistics.entries < 9  # of nine row groups
    assert statistics.misses > 9  # evicted row groups were decoded again


@repeated
def test_many_threads_read_one_source_at_once(
    files: tuple[list[Path], list[dict[str, Any]]], repeat: int
) -> None:
    paths, rows = files
    source = ParquetDataSource(paths, cache_bytes=20_000)  # small: threads evict each other's row groups
    start = threading.Barrier(8)

    def read_randomly(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(40):
            keys = rng.choices(range(len(rows)), k=rng.randrange(1, 16))
            got = [source[keys[0]]] if len(keys) == 1 else source.__getitems__(keys)
            assert_same_outputs(got, [rows[key] for key in keys])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(read_randomly, [repeat * 8 + t for t in range(8)]))


def test_a_file_that_is_not_parquet_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("id,name\n1,a\n")
    with pytest.raises(ValueError, match=re.escape(f"`{path}` is not a readable Parquet file")):
        ParquetDataSource(path)


def test_a_missing_column_is_an_error_naming_the_file(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    path = files[0][0]
    with pytest.raises(ValueError, match=rf"`columns` names \['nope'\], which `{re.escape(str(path))}`"):
        ParquetDataSource(files[0], columns=["id", "nope"])


@pytest.mark.parametrize(
    ("columns", "error", "message"),
    [("id", TypeError, "`columns` must be a sequence"), ([], ValueError, "at least one column")],
    ids=["str", "empty"],
)
def test_bad_columns_are_named(
    files: tuple[list[Path], list[dict[str, Any]]], columns: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        ParquetDataSource(files[0], columns=columns)


def test_keys_outside_the_source_are_index_errors(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    source = ParquetDataSource(files[0])
    with pytest.raises(IndexError, match=r"`key` must be in \[0, 290\), got 290"):
        source[290]
    with pytest.raises(IndexError, match="`keys`"):
        source.__getitems__([-1])
    assert "columns" not in repr(source)
    assert "a.parquet" in repr(source)


@pytest.mark.parametrize("key", [1.6, np.float64(2.0), "3", True, np.bool_(True), None])
def test_keys_that_are_not_integers_are_type_errors_one_by_one_and_in_chunks(
    files: tuple[list[Path], list[dict[str, Any]]], key: Any
) -> None:
    # A float key once read row int(key) from a chunk without a word (a foreign sampler's
    # np.floor(...) is a float): both paths refuse it as `source[key]` always did.
    source = ParquetDataSource(files[0])
    with pytest.raises(TypeError, match="`key` must be an integer"):
        source[key]
    with pytest.raises(TypeError, match="`key` must be an integer"):
        source.__getitems__([key])
    assert_same_outputs(source.__getitems__([np.uint8(3), np.int32(4)]), source.__getitems__([3, 4]))


def test_a_value_s_kind_does_not_depend_on_nulls_in_its_row_group(tmp_path: Path) -> None:
    """Row groups with and without nulls give the same kinds: numpy scalars (or arrays for
    lists of numbers) for values, None for nulls; a list holding a null is a Python list."""
    table = pa.table(
        {
            "x": pa.array([1, 2, 3, None, 5, 6], pa.int32()),
            "y": pa.array([0.5, 1.5, None, 2.5, 3.5, 4.5], pa.float32()),
            "b": pa.array([True, None, False, True, False, True], pa.bool_()),
            "z": pa.array([[1], [2, 3], None, [4, None], [5], []], pa.list_(pa.int16())),
        }
    )
    pq.write_table(table, tmp_path / "n.parquet", row_group_size=3)  # nulls in both groups
    pq.write_table(table.slice(4), tmp_path / "clean.parquet", row_group_size=3)  # none at all
    rows = ParquetDataSource([tmp_path / "n.parquet", tmp_path / "clean.parquet"]).__getitems__(
        list(range(8))
    )
    assert [r["x"] for r in rows] == [1, 2, 3, None, 5, 6, 5, 6]
    assert {type(r["x"]) for r in rows} == {np.int32, type(None)}
    assert {type(r["y"]) for r in rows} == {np.float32, type(None)}
    assert [r["b"] for r in rows][:3] == [True, None, False]
    assert type(rows[0]["b"]) is np.bool_
    assert (rows[2]["z"], rows[3]["z"]) == (None, [4, None])
    assert [(type(rows[i]["z"]), rows[i]["z"].dtype) for i in (0, 1, 4, 5, 6, 7)] == [
        (np.ndarray, np.int16)
    ] * 6
    assert (rows[1]["z"].tolist(), rows[7]["z"].tolist()) == ([2, 3], [])


def test_files_of_different_schemas_are_an_error_naming_the_file_and_column(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": pa.array([1], pa.int32()), "y": [0.5]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"x": pa.array([2], pa.int64()), "y": [1.5]}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"x": pa.array([3], pa.int32())}), tmp_path / "c.parquet")
    pq.write_table(
        pa.table({"x": pa.array([], pa.int32()), "y": pa.array([], pa.float64())}), tmp_path / "e.parquet"
    )
    with pytest.raises(
        ValueError, match=r"b\.parquet` does not .* column 'x' is int64 there, int32 in `.*a\.parquet`"
    ):
        ParquetDataSource([tmp_path / "a.parquet", tmp_path / "b.parquet"])
    with pytest.raises(ValueError, match=r"c\.parquet` does not .* its columns are \['x'\]"):
        ParquetDataSource([tmp_path / "a.parquet", tmp_path / "c.parquet"])
    # Only the columns read count; an empty file of the same schema is fine.
    assert len(ParquetDataSource([tmp_path / "a.parquet", tmp_path / "c.parquet"], columns=["x"])) == 2
    assert (
        len(ParquetDataSource([tmp_path / "a.parquet", tmp_path / "e.parquet", tmp_path / "a.parquet"])) == 2
    )


def written_with_checksums(path: Path, compression: str) -> tuple[bytes, list[dict[str, Any]]]:
    """A file of 100 rows (row groups of 37) whose pages carry CRC-32s, and its rows."""
    rows = make_rows(0, 100)
    write(path, rows, write_page_checksum=True, compression=compression)
    return path.read_bytes(), rows


def read_all_or_error(path: Path) -> list[dict[str, Any]] | str:
    """Every row of the file, or the message of the ValueError that opening or reading it raised."""
    try:
        source = ParquetDataSource(path)
        return source.__getitems__(list(range(len(source))))
    except ValueError as error:
        return str(error)


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_a_changed_bit_in_the_pages_is_an_error_naming_the_file_and_row_group(
    tmp_path: Path, compression: str
) -> None:
    whole, rows = written_with_checksums(tmp_path / "good.parquet", compression)
    footer = len(whole) - 8 - int.from_bytes(whole[-8:-4], "little")
    path, errors = tmp_path / "damaged.parquet", 0
    for offset in random.Random(footer).sample(range(4, footer), 600):  # after the leading magic
        damaged = bytearray(whole)
        damaged[offset] ^= 1 << (offset % 8)
        path.write_bytes(damaged)
        got = read_all_or_error(path)
        if isinstance(got, str):
            assert re.search(
                rf"`{re.escape(str(path))}`: row group \d \(rows \d+ to \d+ of the source\)", got
            ), got
            errors += 1
        else:
            assert_same_outputs(got, rows)  # a change the checksums cover cannot pass unseen
    assert errors > 450


def test_without_checksums_a_changed_value_goes_unseen(tmp_path: Path) -> None:
    whole, rows = written_with_checksums(tmp_path / "good.parquet", "none")
    damaged = bytearray(whole)
    damaged[whole.index(b"row 42") + 4] ^= 0x01  # in the dictionary page: "row 42" becomes "row 52"
    path = tmp_path / "damaged.parquet"
    path.write_bytes(damaged)
    unverified = ParquetDataSource(path, verify_checksums=False)
    assert unverified.verify_checksums is False
    assert unverified[42]["name"] == "row 52"  # what the opt-out costs
    verified = ParquetDataSource(path)
    assert verified.verify_checksums is True
    assert_same_outputs([verified[99]], [rows[99]])  # the last row group has its own dictionary
    message = rf"`{re.escape(str(path))}`: row group 1 \(rows 37 to 73 of the source\) is damaged: .*CRC"
    with pytest.raises(ValueError, match=message):
        verified[42]


@pytest.mark.parametrize(
    "damage",
    ["truncated-footer", "truncated-half", "truncated-to-magic", "end-magic", "footer-length", "garbage"],
)
def test_a_damaged_footer_is_an_error_naming_the_file(tmp_path: Path, damage: str) -> None:
    whole, _ = written_with_checksums(tmp_path / "good.parquet", "snappy")
    damaged = bytearray(whole)
    if damage.startswith("truncated"):
        cut = {
            "truncated-footer": len(whole) - 100,
            "truncated-half": len(whole) // 2,
            "truncated-to-magic": 4,
        }
        damaged = damaged[: cut[damage]]
    elif damage == "end-magic":
        damaged[-1] ^= 0x01
    elif damage == "footer-length":
        damaged[-6] ^= 0x01  # the footer now claims to be 64 KiB longer than the file
    else:
        damaged = bytearray(b"PAR1" + random.Random(0).randbytes(5000) + b"PAR1")
    path = tmp_path / "damaged.parquet"
    path.write_bytes(damaged)
    with pytest.raises(ValueError, match=rf"`{re.escape(str(path))}` is not a readable Parquet file"):
        ParquetDataSource(path)


def test_a_changed_bit_in_the_footer_never_loses_or_adds_rows(tmp_path: Path) -> None:
    # Parquet's footer has no checksum: a changed column name or type can pass
    # (see ParquetDataSource), but a changed row count cannot: it is checked
    # against the row groups, and each row group against its pages.
    whole, rows = written_with_checksums(tmp_path / "good.parquet", "snappy")
    footer = len(whole) - 8 - int.from_bytes(whole[-8:-4], "little")
    path, errors = tmp_path / "damaged.parquet", 0
    for offset in random.Random(1).sample(range(footer, len(whole)), 500):
        damaged = bytearray(whole)
        damaged[offset] ^= 1 << (offset % 8)
        path.write_bytes(damaged)
        got = read_all_or_error(path)
        if isinstance(got, str):
            assert f"`{path}`" in got, got
            errors += 1
        else:
            assert len(got) == len(rows), offset
    assert errors > 100


def test_verify_checksums_must_be_a_bool(files: tuple[list[Path], list[dict[str, Any]]]) -> None:
    with pytest.raises(TypeError, match="`verify_checksums` must be a bool, got 1"):
        ParquetDataSource(files[0], verify_checksums=1)
