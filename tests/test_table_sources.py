"""Sources users already have: a SQLite table (every build), a Hugging Face `datasets.Dataset`
and a Polars DataFrame (where those install: the GIL build of 3.11). Each is read by row
index with columns chosen, by `DataLoader` and `MapDataset.source`, from many threads."""

from __future__ import annotations

import gc
import pickle
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aioloader as al
from tests.conftest import repeated


def read_everything(source: Any, worker_count: int) -> list[Any]:
    loader = al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(len(source), shuffle=True, num_epochs=1, seed=3),
        worker_count=worker_count,
    )
    return list(loader)


def read_from_threads(source: Any, threads: int = 8) -> list[Any]:
    """Every row, read by `threads` threads at once, in interleaved batches and single keys."""
    results: list[Any] = [None] * len(source)
    start = threading.Barrier(threads)

    def read(worker: int) -> None:
        start.wait()
        keys = list(range(worker, len(source), threads))
        rows = source.__getitems__(keys) if worker % 2 else [source[k] for k in keys]
        for key, row in zip(keys, rows, strict=True):
            results[key] = row

    workers = [threading.Thread(target=read, args=(w,)) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def assert_rows_equal(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:
            if isinstance(x[key], np.ndarray):
                np.testing.assert_array_equal(x[key], y[key])
            else:
                assert x[key] == y[key], key


# SQLite.


def make_database(path: Path, rows: int = 300, gaps: bool = True) -> list[dict[str, Any]]:
    """A table `records` written with the sqlite3 module; the rows it holds, in rowid order."""
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, name TEXT, score REAL, data BLOB)")
        connection.executemany(
            "INSERT INTO records VALUES (?, ?, ?, ?)",
            [
                (i * 3 + 1, f"n{i}", None if i % 7 == 0 else i / 4, bytes([i % 256]) * (i % 5))
                for i in range(rows)
            ],
        )
        if gaps:
            connection.execute("DELETE FROM records WHERE id % 5 = 2")
    connection.close()
    with sqlite3.connect(path) as connection:
        kept = connection.execute("SELECT id, name, score, data FROM records ORDER BY rowid").fetchall()
    connection.close()
    return [dict(zip(["id", "name", "score", "data"], row, strict=True)) for row in kept]


@pytest.mark.parametrize("gaps", [True, False], ids=["rowid-gaps", "rowids-in-a-run"])
def test_sqlite_rows_by_index_with_columns_chosen(tmp_path: Path, gaps: bool) -> None:
    expected = make_database(tmp_path / "db.sqlite", gaps=gaps)
    with al.SQLiteDataSource(tmp_path / "db.sqlite", "records") as source:
        assert len(source) == len(expected) == (240 if gaps else 300)
        assert [source[k] for k in range(len(source))] == expected
        assert source.__getitems__([5, 0, 5, len(source) - 1]) == [
            expected[k] for k in (5, 0, 5, len(source) - 1)
        ]
        with pytest.raises(
            IndexError, match=rf"`key` must be in \[0, {len(expected)}\), got {len(expected)}"
        ):
            source[len(expected)]
    some = al.SQLiteDataSource(str(tmp_path / "db.sqlite"), "records", columns=["score", "id"])
    assert some[3] == {"score": expected[3]["score"], "id": expected[3]["id"]}
    assert list(some[3]) == ["score", "id"]
    some.close()


@repeated
def test_sqlite_reads_from_many_threads_and_workers(tmp_path: Path, repeat: int) -> None:
    expected = make_database(tmp_path / "db.sqlite")
    source = al.SQLiteDataSource(tmp_path / "db.sqlite", "records")
    assert read_from_threads(source) == expected
    assert read_everything(source, 4) == read_everything(source, 0)
    assert sorted(r["id"] for r in read_everything(source, 3)) == [r["id"] for r in expected]
    assert (
        list(al.MapDataset.source(source).map(lambda r: r["id"])[::10]) == [r["id"] for r in expected][::10]
    )
    source.close()


def test_sqlite_connections_are_closed_without_warnings(tmp_path: Path) -> None:
    make_database(tmp_path / "db.sqlite")
    source = al.SQLiteDataSource(tmp_path / "db.sqlite", "records")
    read_from_threads(source)
    source.close()
    source.close()  # idempotent
    assert source[1]["id"] == 4  # a read after close opens a connection again ...
    del source
    gc.collect()  # ... which garbage collection closes (no ResourceWarning, which is an error here)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_damaged_sqlite_database_is_an_error_naming_the_file(tmp_path: Path, workers: int) -> None:
    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, data BLOB)")
        rows = [(1, b"a"), (2, bytes(range(256)) * 80), (3, b"c")]  # row 2 spans overflow pages
        connection.executemany("INSERT INTO records VALUES (?, ?)", rows)
    connection.close()
    with path.open("r+b") as file:  # page 4, an overflow page: its pointer to the next one
        file.seek(3 * 4096)
        file.write(b"\xff" * 4)
    source = al.SQLiteDataSource(path, "records")
    loader = al.DataLoader(data_source=source, sampler=al.IndexSampler(3, num_epochs=1), worker_count=workers)
    got: list[Any] = []
    with pytest.raises(sqlite3.DatabaseError, match="malformed") as raised:
        got.extend(loader)
    assert got == [{"id": 1, "data": b"a"}]
    notes = "\n".join(raised.value.__notes__)
    assert f"table 'records' of `{path}`" in notes
    assert "index=1, record_key=1" in notes
    source.close()


def test_sqlite_pickles_as_a_new_source_over_the_same_table(tmp_path: Path) -> None:
    expected = make_database(tmp_path / "db.sqlite")
    source = al.SQLiteDataSource(tmp_path / "db.sqlite", "records", columns=["name"])
    copy = pickle.loads(pickle.dumps(source))
    assert copy is not source
    assert copy[10] == {"name": expected[10]["name"]}
    assert copy.columns == ("name",)
    source.close()
    copy.close()


def test_a_row_deleted_after_the_source_was_made_is_an_error(tmp_path: Path) -> None:
    expected = make_database(tmp_path / "db.sqlite")
    source = al.SQLiteDataSource(tmp_path / "db.sqlite", "records")
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        connection.execute("DELETE FROM records WHERE id = ?", (expected[4]["id"],))
    connection.close()
    assert source[3] == expected[3]
    with pytest.raises(
        KeyError, match=rf"row 4 \(rowid {expected[4]['id']}\) is no longer in table 'records'"
    ):
        source.__getitems__([3, 4])
    source.close()


def test_odd_table_and_column_names_are_quoted(tmp_path: Path) -> None:
    path = tmp_path / "odd.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute('CREATE TABLE "my ""table""; --" (rowid TEXT, "select" INTEGER)')
        connection.executemany('INSERT INTO "my ""table""; --" VALUES (?, ?)', [("a", 1), ("b", 2)])
    connection.close()
    source = al.SQLiteDataSource(path, 'my "table"; --')
    assert [source[0], source[1]] == [{"rowid": "a", "select": 1}, {"rowid": "b", "select": 2}]
    source.close()


def sqlite_error_cases(tmp_path: Path) -> list[tuple[Callable[[], Any], type, str]]:
    make_database(tmp_path / "db.sqlite")
    (tmp_path / "text.sqlite").write_text("not a database, just text " * 100)
    with sqlite3.connect(tmp_path / "norowid.sqlite") as connection:
        connection.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER) WITHOUT ROWID")
    connection.close()
    db = tmp_path / "db.sqlite"
    return [
        (
            lambda: al.SQLiteDataSource(tmp_path / "missing.sqlite", "t"),
            FileNotFoundError,
            r"`path` .* is not a file",
        ),
        (
            lambda: al.SQLiteDataSource(tmp_path / "text.sqlite", "t"),
            ValueError,
            r"is not a readable SQLite database",
        ),
        (
            lambda: al.SQLiteDataSource(db, "nope"),
            ValueError,
            r"`table` 'nope' is not a table of .*; it has \['records'\]",
        ),
        (
            lambda: al.SQLiteDataSource(db, "records", ["id", "x"]),
            ValueError,
            r"`columns` names \['x'\], which table",
        ),
        (
            lambda: al.SQLiteDataSource(db, "records", "id"),
            TypeError,
            r"`columns` must be a sequence of column names",
        ),
        (lambda: al.SQLiteDataSource(db, ""), TypeError, r"`table` must be a table name"),
        (lambda: al.SQLiteDataSource(3, "t"), TypeError, r"`path` must be a str or a Path, got int"),  # type: ignore[arg-type]
        (
            lambda: al.SQLiteDataSource(tmp_path / "norowid.sqlite", "t"),
            ValueError,
            r"has no rowid \(a WITHOUT ROWID",
        ),
    ]


def test_bad_sqlite_arguments_are_refused_by_name(tmp_path: Path) -> None:
    for make, error, match in sqlite_error_cases(tmp_path):
        with pytest.raises(error, match=match):
            make()
        gc.collect()  # the half-made source closes its connection


# Hugging Face datasets.


def hf_dataset() -> Any:
    datasets = pytest.importorskip(
        "datasets", reason="datasets is installed on the GIL build of CPython 3.11 only"
    )
    rng = np.random.default_rng(0)
    return datasets.Dataset.from_dict(
        {
            "tokens": [rng.integers(0, 1000, rng.integers(1, 9)).tolist() for _ in range(200)],
            "label": list(range(200)),
            "text": [f"t{i}" for i in range(200)],
        }
    )


def test_a_hugging_face_dataset_is_read_as_the_dataset_reads_itself() -> None:
    dataset = hf_dataset()
    source = al.HuggingFaceDataSource(dataset)
    assert len(source) == 200
    assert source[7] == dataset[7]
    assert source.__getitems__([9, 2, 9]) == [dataset[9], dataset[2], dataset[9]]
    numpy = al.HuggingFaceDataSource(dataset.with_format("numpy"), columns=["tokens", "label"])
    row = numpy[3]
    assert set(row) == {"tokens", "label"}
    assert isinstance(row["tokens"], np.ndarray)
    np.testing.assert_array_equal(row["tokens"], dataset[3]["tokens"])
    shuffled = dataset.shuffle(seed=1)  # an indices mapping over the same table
    assert al.HuggingFaceDataSource(shuffled)[0] == shuffled[0] != dataset[0]
    with pytest.raises(IndexError, match=r"`key` must be in \[0, 200\), got -1"):
        source[-1]


@repeated
def test_a_hugging_face_dataset_reads_from_many_threads_and_workers(repeat: int) -> None:
    dataset = hf_dataset().with_format("numpy")
    source = al.HuggingFaceDataSource(dataset, columns=["tokens", "label"])
    assert_rows_equal(read_from_threads(source), [source[k] for k in range(len(source))])
    assert_rows_equal(read_everything(source, 4), read_everything(source, 0))
    batches = list(al.MapDataset.source(source).map(lambda r: r["label"]).batch(50))
    assert np.concatenate(batches).tolist() == list(range(200))


def test_bad_hugging_face_arguments_are_refused_by_name() -> None:
    dataset = hf_dataset()
    import datasets

    # A bare instance: making a real one imports torch here, 10 s for a type check.
    streaming = datasets.IterableDataset.__new__(datasets.IterableDataset)
    cases: list[tuple[Any, Any, type, str]] = [
        (
            datasets.DatasetDict({"train": dataset}),
            None,
            TypeError,
            r"`dataset` must be one split, such as dataset\['train'\]",
        ),
        (streaming, None, TypeError, r"got an IterableDataset \(load it without streaming=True\)"),
        ([1, 2], None, TypeError, r"`dataset` must be a datasets.Dataset, got list"),
        (
            dataset,
            ["label", "nope"],
            ValueError,
            r"`columns` names \['nope'\], which the dataset does not have",
        ),
    ]
    for value, columns, error, match in cases:
        with pytest.raises(error, match=match):
            al.HuggingFaceDataSource(value, columns)


# Polars.


def polars_frame() -> Any:
    pl = pytest.importorskip("polars", reason="polars is installed on the GIL build of CPython 3.11 only")
    pytest.importorskip("pyarrow")
    return pl.DataFrame(
        {
            "id": list(range(100)),
            "tokens": [list(range(i % 6)) for i in range(100)],
            "score": [None if i % 9 == 0 else i / 3 for i in range(100)],
            "text": [f"s{i}" for i in range(100)],
        },
        schema_overrides={"tokens": pl.List(pl.Int32)},
    )


def test_a_polars_frame_reads_as_the_same_rows_in_parquet_would(tmp_path: Path) -> None:
    frame = polars_frame()
    source = al.PolarsDataSource(frame)
    frame.write_parquet(tmp_path / "frame.parquet")  # Polars' own writer
    parquet = al.ParquetDataSource([str(tmp_path / "frame.parquet")])
    assert_rows_equal([source[k] for k in range(100)], [parquet[k] for k in range(100)])
    row = source[10]
    assert row["tokens"].dtype == np.int32
    assert row["tokens"].tolist() == [0, 1, 2, 3]
    assert source[9]["score"] is None
    assert source[10]["score"] == pytest.approx(10 / 3)
    assert list(al.PolarsDataSource(frame, columns=["text", "id"])[4]) == ["text", "id"]


@repeated
def test_a_polars_frame_reads_from_many_threads_and_workers(repeat: int) -> None:
    source = al.PolarsDataSource(polars_frame())
    assert_rows_equal(read_from_threads(source), [source[k] for k in range(len(source))])
    assert_rows_equal(read_everything(source, 4), read_everything(source, 0))
    assert list(al.MapDataset.source(source).map(lambda r: int(r["id"]))[::-7]) == list(range(99, -1, -7))


def test_bad_polars_arguments_are_refused_by_name() -> None:
    frame = polars_frame()
    cases: list[tuple[Any, Any, type, str]] = [
        (frame.lazy(), None, TypeError, r"got a LazyFrame: call .collect\(\) first"),
        ({"id": [1]}, None, TypeError, r"`frame` must be a polars.DataFrame, got dict"),
        (frame, ["id", "id"], ValueError, r"`columns` must not name a column twice"),
        (frame, ["nope"], ValueError, r"`columns` names \['nope'\], which the frame does not have"),
    ]
    for value, columns, error, match in cases:
        with pytest.raises(error, match=match):
            al.PolarsDataSource(value, columns)
    with pytest.raises(IndexError, match=r"`key` must be in \[0, 100\), got 100"):
        al.PolarsDataSource(frame)[100]
