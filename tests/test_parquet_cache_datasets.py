"""`ParquetIterDataset` and `CacheIterDataset` of `grain.experimental`.

Against Grain 0.2.18 where it is installed (the GIL build of CPython 3.11; elsewhere
those tests skip): the same rows, values of the same types (NaN for a null in an int
column, as Grain's `to_numpy()` gives it), the same interleaving of several files
(a cycle of 16), the same cached elements and parent reads. On every build: the values
and orders written out, a fresh iterator given `get_state()` after any number of
elements gives exactly the rest, and bad files, bad arguments and states of other
pipelines are errors naming what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq
import pytest

import aioloader
from aioloader.experimental import CacheIterDataset, LimitIterDataset, ParquetIterDataset, RepeatIterDataset
from tests.support.datasets import assert_refuses_state, async_halves, state_after
from tests.support.outputs import assert_same

TEXT = [["first a", "first b", "first c", "first d"], ["second a", "second b", "second c", "second d"]]

# 18 files (more than the cycle of 16), file k holding 10k, 10k+1, ... (1 + k % 3 rows):
# the order Grain 0.2.18 gives.
MANY_ORDER = [
    *[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150],
    *[11, 21, 41, 51, 71, 81, 101, 111, 131, 141, 160, 22, 170, 52, 82, 112, 142, 161, 171, 172],
]


def write(path: Path, columns: dict[str, Any], **options: Any) -> str:
    pq.write_table(pa.table(columns), path, **options)
    return str(path)


@pytest.fixture
def two_files(tmp_path: Path) -> list[str]:
    return [write(tmp_path / f"text{i}.parquet", {"text": t}, row_group_size=2) for i, t in enumerate(TEXT)]


@pytest.fixture
def many_files(tmp_path: Path) -> list[str]:
    return [
        write(
            tmp_path / f"many{k:02}.parquet", {"x": [10 * k + j for j in range(1 + k % 3)]}, row_group_size=2
        )
        for k in range(18)
    ]


@pytest.fixture
def mixed_file(tmp_path: Path) -> str:
    """Ints, floats, strings, bytes, booleans, lists and structs, with nulls, in row groups of 2."""
    columns = {
        "i": [1, None, 3],
        "f": [1.5, 2.5, None],
        "s": ["a", None, "c"],
        "by": [b"x", b"y", None],
        "b": [True, False, None],
        "l": [[1, 2], None, [3]],
        "st": [{"a": 1}, {"a": 2}, None],
    }
    return write(tmp_path / "mixed.parquet", columns, row_group_size=2)


def assert_rows(mine: list[Any], theirs: list[Any]) -> None:
    """`assert_same`, where a NaN scalar equals a NaN scalar of its type."""
    assert len(mine) == len(theirs)
    for n, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        assert set(a) == set(b), n
        for key in b:
            if isinstance(b[key], float) and math.isnan(b[key]):
                assert type(a[key]) is type(b[key]), (n, key, a[key])
                assert math.isnan(a[key]), (n, key, a[key])
            else:
                assert_same(a[key], b[key], f"row {n}[{key!r}]")


def values(ds: Any, column: str = "x") -> list[Any]:
    return [row[column].item() for row in ds]


# ParquetIterDataset: rows and values.


def test_one_file_rows(grain: ModuleType, two_files: list[str]) -> None:
    mine = list(ParquetIterDataset(two_files[0]))
    assert_rows(mine, list(grain.experimental.ParquetIterDataset(two_files[0])))


def test_one_file_rows_written_out(two_files: list[str]) -> None:
    assert list(ParquetIterDataset(two_files[0])) == [{"text": t} for t in TEXT[0]]
    assert list(ParquetIterDataset(Path(two_files[1]))) == [{"text": t} for t in TEXT[1]]


def test_value_types(grain: ModuleType, mixed_file: str) -> None:
    assert_rows(list(ParquetIterDataset(mixed_file)), list(grain.experimental.ParquetIterDataset(mixed_file)))


def test_value_types_written_out(mixed_file: str) -> None:
    first, second, third = ParquetIterDataset(mixed_file)
    # Row group 0 has a null int: its ints are float64 there, the null NaN (as Grain gives them).
    assert [type(row["i"]) for row in (first, second, third)] == [np.float64, np.float64, np.int64]
    assert first["i"] == 1.0
    assert math.isnan(second["i"])
    assert third["i"] == 3
    assert [type(row["f"]) for row in (first, second, third)] == [np.float64] * 3
    assert first["f"] == 1.5
    assert math.isnan(third["f"])
    assert (first["s"], second["s"], third["s"]) == ("a", None, "c")
    assert (first["by"], second["by"], third["by"]) == (b"x", b"y", None)
    assert (first["b"], type(first["b"]), second["b"], third["b"]) == (True, np.bool_, False, None)
    assert_same(first["l"], np.array([1, 2]))
    assert second["l"] is None
    assert_same(third["l"], np.array([3]))
    assert (first["st"], second["st"], third["st"]) == ({"a": 1}, {"a": 2}, None)


def test_several_files_interleaved(grain: ModuleType, two_files: list[str], many_files: list[str]) -> None:
    for paths in (two_files, many_files):
        assert_rows(list(ParquetIterDataset(paths)), list(grain.experimental.ParquetIterDataset(paths)))


def test_several_files_written_out(two_files: list[str], many_files: list[str]) -> None:
    interleaved = [{"text": t} for pair in zip(*TEXT, strict=True) for t in pair]
    assert list(ParquetIterDataset(two_files)) == interleaved
    assert values(ParquetIterDataset(many_files)) == MANY_ORDER
    assert values(ParquetIterDataset(many_files[:1])) == [0]  # a list of one: that file


SLICES = [slice(0, 1), slice(1, 2), slice(None, None, 2), slice(3, 17, 5), slice(None, None, -1)]


def test_set_slice_like_grain(grain: ModuleType, two_files: list[str], many_files: list[str]) -> None:
    """`set_slice(sl)` keeps the files `paths[sl]`, in place (Grain's way to shard by file)."""
    for paths in (two_files, many_files):
        for sl in SLICES:
            if not paths[sl]:
                continue
            mine, theirs = ParquetIterDataset(paths), grain.experimental.ParquetIterDataset(paths)
            mine.set_slice(sl)
            theirs.set_slice(sl, sequential_slice=True)
            assert_rows(list(mine), list(theirs))


def test_set_slice_written_out(two_files: list[str], many_files: list[str]) -> None:
    for k in range(len(two_files)):
        ds = ParquetIterDataset(two_files)
        ds.set_slice(slice(k, k + 1), sequential_slice=False)
        assert list(ds) == [{"text": t} for t in TEXT[k]]
        assert_resumes(ds)
    ds = ParquetIterDataset(many_files)
    ds.set_slice(slice(None, None, 6))  # files 0, 6 and 12: 1 row each
    assert values(ds) == [0, 60, 120]
    with pytest.raises(ValueError, match=r"`sl` slice\(2, 5, None\) leaves none of the 2 files"):
        ParquetIterDataset(two_files).set_slice(slice(2, 5))
    with pytest.raises(TypeError, match="`sl` must be a slice, got 1"):
        ParquetIterDataset(two_files).set_slice(1)  # type: ignore[arg-type]


def assert_resumes(ds: Any) -> None:
    everything = list(ds)
    for k in range(len(everything) + 1):
        fresh = iter(ds)
        fresh.set_state(state_after(ds, k))
        assert list(fresh) == everything[k:], k


def test_read_kwargs_passed_through(grain: ModuleType, mixed_file: str) -> None:
    for kwargs in ({"memory_map": True}, {"binary_type": pa.binary_view()}, {"buffer_size": 1024}):
        mine = list(ParquetIterDataset(mixed_file, **kwargs))
        assert_rows(mine, list(grain.experimental.ParquetIterDataset(mixed_file, **kwargs)))


def test_read_kwargs_written_out(mixed_file: str, tmp_path: Path) -> None:
    local = pyarrow.fs.LocalFileSystem()
    assert [row["s"] for row in ParquetIterDataset(mixed_file, filesystem=local)] == ["a", None, "c"]
    # A dictionary-encoded column gives its values, and None for a null (not the first value).
    assert [row["s"] for row in ParquetIterDataset(mixed_file, read_dictionary=["s"])] == ["a", None, "c"]
    with pytest.raises(FileNotFoundError):  # given a filesystem, the path is its to find
        list(ParquetIterDataset(str(tmp_path / "absent.parquet"), filesystem=local))


def test_empty_files_then_map_and_batch(grain: ModuleType, tmp_path: Path, two_files: list[str]) -> None:
    empty = write(tmp_path / "empty.parquet", {"text": pa.array([], pa.string())})
    assert list(ParquetIterDataset(empty)) == []
    no_groups = str(tmp_path / "no_groups.parquet")
    pq.ParquetWriter(no_groups, pa.schema([("text", pa.string())])).close()
    assert list(ParquetIterDataset(no_groups)) == []  # Grain fails on a file without row groups
    paths = [empty, two_files[0], empty, two_files[1]]

    def build(ds: Any) -> Any:
        # Lengths: aioloader batches strings into an object array, Grain into a '<U' one.
        return ds.map(lambda row: len(row["text"]) * (1 if row["text"].startswith("first") else -1)).batch(3)

    mine = list(build(ParquetIterDataset(paths)))
    assert_same(mine, list(build(grain.experimental.ParquetIterDataset(paths))))
    assert [b.tolist() for b in mine] == [[7, -8, 7], [-8, 7, -8], [7, -8]]


# ParquetIterDataset: states.


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("which", ["one", "two", "many"])
def test_resume_after_every_k(two_files: list[str], many_files: list[str], which: str, workers: int) -> None:
    path: Any = {"one": two_files[0], "two": two_files, "many": many_files}[which]
    ds = ParquetIterDataset(path).map(lambda row: next(iter(row.values()))).prefetch(workers)
    everything = list(ds)
    for k in range(len(everything) + 1):  # 0, inside a row group, across row groups and files, the end
        state = json.loads(json.dumps(state_after(ds, k)))
        fresh = iter(ds)
        fresh.set_state(state)
        assert list(fresh) == everything[k:], k


def test_resume_async(many_files: list[str]) -> None:
    taken, rest = async_halves(ParquetIterDataset(many_files), 5)
    assert [r["x"].item() for r in taken + rest] == MANY_ORDER


def test_state_of_one_file(two_files: list[str]) -> None:
    iterator = iter(ParquetIterDataset(two_files[0]))
    for _ in range(3):
        next(iterator)
    assert iterator.get_state()["dataset"] == {"stage": "parquet", "row_group": 1, "row": 1}
    list(iterator)
    assert iterator.get_state()["dataset"] == {"stage": "parquet", "row_group": 1, "row": 2}


def test_states_of_other_pipelines(two_files: list[str], many_files: list[str], tmp_path: Path) -> None:
    one, many = ParquetIterDataset(two_files[0]), ParquetIterDataset(many_files)
    assert_refuses_state(one, many)
    assert_refuses_state(many, one)
    assert_refuses_state(aioloader.MapDataset.range(5).to_iter_dataset(), one)
    assert_refuses_state(many, ParquetIterDataset(many_files[:3]))
    fresh = iter(ParquetIterDataset(two_files[0]))
    state = {"version": 1, "dataset": {"stage": "parquet", "row_group": 5, "row": 0}}
    with pytest.raises(ValueError, match=r"row_group=5.*text0\.parquet"):
        fresh.set_state(state)
    state["dataset"] = {"stage": "parquet", "row_group": 0, "row": 3}
    with pytest.raises(ValueError, match="does not fit"):
        fresh.set_state(state)
    state["dataset"] = {"stage": "parquet", "row_group": -1, "row": 0}
    with pytest.raises(ValueError, match="row_group=-1"):
        fresh.set_state(state)


# ParquetIterDataset: bad input.


def test_missing_file_named(tmp_path: Path, two_files: list[str]) -> None:
    missing = str(tmp_path / "missing.parquet")
    with pytest.raises(FileNotFoundError, match=r"path\[1\].*missing.parquet"):
        ParquetIterDataset([two_files[0], missing])


def test_missing_after_made_named(tmp_path: Path) -> None:
    path = write(tmp_path / "gone.parquet", {"x": [1]})
    ds = ParquetIterDataset(path)
    os.remove(path)
    with pytest.raises(FileNotFoundError, match=r"gone\.parquet"):
        list(ds)


def test_not_parquet_named(tmp_path: Path, two_files: list[str]) -> None:
    text = tmp_path / "notes.parquet"
    text.write_text("not parquet at all\n" * 10)
    iterator = iter(ParquetIterDataset([two_files[0], str(text)]))
    assert next(iterator) == {"text": "first a"}
    with pytest.raises(ValueError, match=r"notes\.parquet` is not a readable Parquet file"):
        next(iterator)


def test_damaged_footer_named(tmp_path: Path, two_files: list[str]) -> None:
    data = Path(two_files[0]).read_bytes()
    damaged = tmp_path / "cut.parquet"
    damaged.write_bytes(data[:-12] + b"\xff" * 4 + data[-8:])  # footer length and magic kept
    with pytest.raises(ValueError, match=r"cut\.parquet` is not a readable Parquet file"):
        list(ParquetIterDataset(str(damaged)))


def damaged_pages(tmp_path: Path) -> str:
    """A file whose pages have checksums, with bytes of its second row group's data changed."""
    path = tmp_path / "pages.parquet"
    numbers = np.arange(4000, dtype=np.int64)
    write(path, {"x": numbers}, row_group_size=2000, compression="NONE", write_page_checksum=True)
    data = bytearray(path.read_bytes())
    at = data.find((3000).to_bytes(8, "little"))
    data[at : at + 8] = (123456789).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    return str(path)


def test_damaged_pages_named(tmp_path: Path) -> None:
    path = damaged_pages(tmp_path)
    iterator = iter(ParquetIterDataset(path))
    assert [next(iterator)["x"] for _ in range(2000)] == list(range(2000))
    with pytest.raises(ValueError, match=r"pages\.parquet`: row group 1 is damaged"):
        next(iterator)
    # Unverified (as Grain reads by default), the damage goes through.
    unverified = values(ParquetIterDataset(path, page_checksum_verification=False))
    assert unverified[3000] == 123456789


def test_bad_arguments_named(tmp_path: Path, two_files: list[str]) -> None:
    with pytest.raises(ValueError, match="`path` must name at least one"):
        ParquetIterDataset([])
    with pytest.raises(TypeError, match="`path` must be a path or a sequence"):
        ParquetIterDataset(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"`path\[1\]` must be a str"):
        ParquetIterDataset([two_files[0], 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="`read_kwargs` colums are not parameters"):
        ParquetIterDataset(two_files[0], colums=["text"])
    with pytest.raises(FileNotFoundError, match="is not a file"):
        ParquetIterDataset(str(tmp_path))  # a folder
    with pytest.raises(ValueError, match=r"`path\[1\]` holds a NUL byte"):
        ParquetIterDataset([two_files[0], two_files[1].encode() + b"\0"])
    with pytest.raises(TypeError, match=r"`path\[0\]` .* is not a usable path"):
        ParquetIterDataset(LyingPath())  # type: ignore[arg-type]
    # A path as bytes reads as os.fsdecode gives it.
    as_bytes = ParquetIterDataset([p.encode() for p in two_files])
    assert list(as_bytes) == list(ParquetIterDataset(two_files))


class LyingPath:
    """An os.PathLike whose `__fspath__` gives neither str nor bytes."""

    def __fspath__(self) -> int:
        return 5


def test_repr(two_files: list[str]) -> None:
    assert repr(ParquetIterDataset(two_files, memory_map=True)).startswith("ParquetIterDataset([")
    assert "memory_map=True" in repr(ParquetIterDataset(two_files, memory_map=True))


# CacheIterDataset.


class Counter:
    """A map that counts the elements it sees (how often the parent was read)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, x: Any) -> Any:
        self.count += 1
        return x


def in_order(count: int) -> Any:
    """range(count), run in order: a map after it sees each element once (on an engine
    part, a map reads ahead of what is asked)."""
    return LimitIterDataset(aioloader.MapDataset.range(count).to_iter_dataset(), count)


def cached_ten(lib: Any, counter: Counter, epochs: int) -> Any:
    """Grain's test: 10 elements, counted, cached, repeated (the count after the limit,
    which runs in order: an engine part before it may read ahead)."""
    ds = lib.experimental.LimitIterDataset(lib.MapDataset.range(20).to_iter_dataset(), 10).map(counter)
    return lib.experimental.RepeatIterDataset(lib.experimental.CacheIterDataset(ds), num_epochs=epochs)


def test_cache_elements(grain: ModuleType, two_files: list[str]) -> None:
    for build in (
        lambda lib: lib.MapDataset.range(5).to_iter_dataset().map(lambda x: x**2),
        lambda lib: lib.MapDataset.range(0).to_iter_dataset(),
        lambda lib: lib.experimental.ParquetIterDataset(two_files),
    ):
        theirs = list(grain.experimental.CacheIterDataset(build(grain)))
        assert_same(list(CacheIterDataset(build(aioloader))), theirs)


def test_cache_reads_parent_once_over_epochs(grain: ModuleType) -> None:
    mine, theirs = Counter(), Counter()
    assert list(cached_ten(aioloader, mine, 3)) == list(cached_ten(grain, theirs, 3))
    assert mine.count == theirs.count == 10


def test_cache_written_out() -> None:
    counter = Counter()
    ds = cached_ten(aioloader, counter, 2)
    assert list(ds) == [*range(10), *range(10)]
    assert counter.count == 10
    # The cache is the dataset's: a second iteration reads it too (Grain's reads the parent again).
    assert list(ds) == [*range(10), *range(10)]
    assert counter.count == 10
    assert list(CacheIterDataset(aioloader.MapDataset.range(0))) == []  # a MapDataset parent too


def test_cache_kept_objects() -> None:
    ds = CacheIterDataset(aioloader.MapDataset.range(3).to_iter_dataset().map(lambda x: [x]))
    first, second = list(ds), list(ds)
    assert first == second == [[0], [1], [2]]
    assert all(a is b for a, b in zip(first, second, strict=True))  # as Grain gives them again


def test_cache_not_kept_when_cut_short() -> None:
    counter = Counter()
    ds = CacheIterDataset(in_order(5).map(counter))
    iterator = iter(ds)
    assert [next(iterator), next(iterator)] == [0, 1]
    iterator.close()
    assert list(ds) == [0, 1, 2, 3, 4]  # read from the parent's start, all of it
    assert list(ds) == [0, 1, 2, 3, 4]
    assert counter.count == 2 + 5


@pytest.mark.parametrize("workers", [0, 2])
def test_cache_resume_after_every_k(workers: int) -> None:
    def build() -> Any:
        ds = LimitIterDataset(aioloader.MapDataset.range(10).to_iter_dataset(), 5)
        return RepeatIterDataset(CacheIterDataset(ds), num_epochs=2).prefetch(workers)

    everything = list(build())
    assert everything == [0, 1, 2, 3, 4] * 2
    for k in range(len(everything) + 1):
        state = json.loads(json.dumps(state_after(build(), k)))  # from a cache not yet full
        for ds in (build(), filled := build()):
            if ds is filled:
                list(ds)  # this one resumes from its full cache
            fresh = iter(ds)
            fresh.set_state(state)
            assert list(fresh) == everything[k:], (k, ds is filled)


def test_cache_resume_like_grain(grain: ModuleType) -> None:
    for k in (0, 3, 7, 10):
        got = []
        for lib in (grain, aioloader):
            counter = Counter()
            ds = cached_ten(lib, counter, 1)
            iterator = iter(ds)
            for _ in range(k):
                next(iterator)
            state = iterator.get_state()
            counter.count = 0
            resumed = iter(cached_ten(lib, counter, 1))
            resumed.set_state(state)
            got.append((list(resumed), counter.count))  # re-read from the start: k + the rest
        assert got[0] == got[1], k


def test_cache_state_back_on_one_iterator() -> None:
    counter = Counter()
    ds = CacheIterDataset(in_order(4).map(counter))
    iterator = iter(ds)
    start = iterator.get_state()
    assert list(iterator) == [0, 1, 2, 3]
    end = iterator.get_state()
    assert end["dataset"] == {"stage": "cache", "position": 4, "parent": end["dataset"]["parent"]}
    iterator.set_state(start)
    assert list(iterator) == [0, 1, 2, 3]
    # The parent stays where `set_state` put it (as Grain's): it was not read again.
    parent = start["dataset"]["parent"]
    assert iterator.get_state()["dataset"] == {"stage": "cache", "position": 4, "parent": parent}
    assert counter.count == 4  # the second pass came from the cache


def test_cache_state_round_trips_like_grain(grain: ModuleType) -> None:
    """A state has one shape, from the parent's start to the cache's end and from the cache,
    and `get_state()` after `set_state(s)` is `s`: Grain's own checkpoint test passes."""
    for build in (
        lambda lib: lib.MapDataset.range(5).to_iter_dataset(),
        lambda lib: lib.experimental.LimitIterDataset(lib.MapDataset.range(10).to_iter_dataset(), 5),
    ):
        mine = CacheIterDataset(build(aioloader))
        grain.experimental.assert_equal_output_after_checkpoint(mine)
        grain.experimental.assert_equal_output_after_checkpoint(RepeatIterDataset(mine, num_epochs=2))
        theirs = grain.experimental.CacheIterDataset(build(grain))
        assert list(mine) == list(theirs)


def test_cache_state_from_the_cache_resumes() -> None:
    ds = CacheIterDataset(in_order(4))
    iterator = iter(ds)
    states = [iterator.get_state()]
    for _ in range(4):
        next(iterator)
        states.append(iterator.get_state())
    shape = {key: type(value) for key, value in states[0]["dataset"].items()}
    for k, state in enumerate(states):
        assert {key: type(value) for key, value in state["dataset"].items()} == shape, k
        for other in (ds, CacheIterDataset(in_order(4))):  # from the full cache, and not
            fresh = iter(other)
            fresh.set_state(json.loads(json.dumps(state)))
            assert fresh.get_state() == state, k
            assert list(fresh) == [0, 1, 2, 3][k:], k


def test_cache_states_of_other_pipelines() -> None:
    five = CacheIterDataset(aioloader.MapDataset.range(5).to_iter_dataset())
    assert_refuses_state(five, CacheIterDataset(LimitIterDataset(aioloader.MapDataset.range(5), 9)))
    assert_refuses_state(aioloader.MapDataset.range(5).to_iter_dataset(), five)
    assert_refuses_state(five, aioloader.MapDataset.range(5).to_iter_dataset())
    # A position past the parent's end: refused when the cache is full, and when it is not.
    state = {"version": 1, "dataset": {"stage": "cache", "position": 7, "parent": None}}
    for filled in (False, True):
        ds = CacheIterDataset(aioloader.MapDataset.range(5).to_iter_dataset())
        if filled:
            list(ds)
        with pytest.raises(ValueError, match="position 7"):
            resume_and_read(ds, state)


def resume_and_read(ds: Any, state: dict[str, Any]) -> list[Any]:
    iterator = iter(ds)
    iterator.set_state(state)
    return list(iterator)


def test_cache_bad_parent() -> None:
    with pytest.raises(TypeError, match="`parent` must be an IterDataset"):
        CacheIterDataset([1, 2, 3])  # type: ignore[arg-type]
