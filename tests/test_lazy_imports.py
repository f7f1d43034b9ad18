"""`import aioloader` loads what the sync path needs, and no more (each check in a fresh process).

A user's script pays for the import before its first batch: asyncio (with
ssl, through aiofiles), the storage formats and JAX load only when something
uses them: `async for`, a storage source, `device_put`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Modules the sync path must not load: each costs milliseconds to import.
HEAVY = ["asyncio", "ssl", "jax", "aiofiles", "sqlite3", "subprocess", "concurrent.futures", "zlib"]
# Each of these costs a few ms on 3.13t: json and hashlib load with the first state
# (`get_state`), numpy.ma with np.unique, which the sources avoid (`keys.distinct`),
# logging with the first record aioloader writes.
HEAVY += ["json", "hashlib", "numpy.ma", "logging"]


def last_line_after(code: str, report: str) -> str:
    """The last line printed by running `code`, then `report`, in a fresh interpreter."""
    command = [sys.executable, "-c", f"import sys\n{code}\n{report}"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1]


def loaded_after(code: str) -> list[str]:
    """Which of HEAVY are in `sys.modules` after running `code` in a fresh interpreter."""
    report = f"found = sorted(set({HEAVY!r}) & set(sys.modules))\nimport json\nprint(json.dumps(found))"
    result: list[str] = json.loads(last_line_after(code, report))
    return result


def test_numpy_itself_loads_none_of_them() -> None:
    # Otherwise the checks below would pass or fail for numpy's sake, not aioloader's.
    assert loaded_after("import numpy") == []


def test_import_aioloader_loads_none_of_them() -> None:
    assert loaded_after("import numpy, aioloader") == []


def aioloader_modules_after(code: str) -> list[str]:
    """Which of aioloader's own modules are in `sys.modules` after running `code` in a fresh interpreter."""
    report = "print(' '.join(sorted(m for m in sys.modules if m.startswith('aioloader'))))"
    return last_line_after(code, report).split()


# Loaded on first use of a name of theirs: none of them is on the sync path.
LATER = ["aioloader._dataset", "aioloader._sources.", "aioloader._operations.packing", "aioloader.checkpoint"]


def test_import_aioloader_leaves_the_dataset_api_and_exports_for_later() -> None:
    loaded = aioloader_modules_after("import aioloader")
    assert "aioloader._loader" in loaded  # the check sees our modules at all
    assert [m for m in loaded if m.startswith(tuple(LATER)) and m != "aioloader._sources.protocols"] == []
    assert "aioloader._operations.concat_then_split" not in loaded
    assert "aioloader._observability.prometheus" not in loaded
    # Each of these costs milliseconds: the first `statistics()` (or a close) loads the
    # snapshot's classes, `executor="interpreter"` the subinterpreter executor.
    assert "aioloader._observability.statistics" not in loaded
    assert [m for m in loaded if m.startswith("aioloader._executors.interpreter")] == []


def test_the_statistics_classes_load_with_their_names_and_with_statistics() -> None:
    code = (
        "import aioloader\n"
        "loader = aioloader.DataLoader(data_source=aioloader.RangeDataSource(0, 10, 1), "
        "sampler=aioloader.SequentialSampler(10), worker_count=0)\n"
        "iterator = iter(loader)\n"
        "assert isinstance(iterator.statistics(), aioloader.LoaderStatistics)\n"
        "assert aioloader.StageStatistics.__module__ == 'aioloader._observability.statistics'"
    )
    assert "aioloader._observability.statistics" in aioloader_modules_after(code)


def test_a_dataset_name_loads_its_modules_when_named() -> None:
    loaded = aioloader_modules_after("import aioloader\naioloader.MapDataset")
    assert "aioloader._dataset.base" in loaded
    assert "aioloader._sources.parquet" not in loaded


SYNC_RUN = """
import aioloader

class AddOne(aioloader.MapTransform):
    def map(self, element):
        return element + 1

loader = aioloader.DataLoader(
    data_source=aioloader.RangeDataSource(0, 100, 1),
    sampler=aioloader.IndexSampler(100, shuffle=True, seed=3, num_epochs=1),
    operations=[AddOne(), aioloader.Batch(8)],
    worker_count={workers},
)
total = sum(int(batch.sum()) for batch in loader)
assert total == sum(range(1, 101)), total
"""


@pytest.mark.parametrize("workers", [0, 2], ids=["inline", "threads"])
def test_a_sync_loader_runs_to_the_end_without_them(workers: int) -> None:
    assert loaded_after(SYNC_RUN.format(workers=workers)) == []


# The threaded engine's modules (about 9 ms of the import on 3.13t): a loader with
# workers loads them with its first engine, `worker_count=0` never. (The read pool, with
# `queue`, loads with any engine: `worker_count=0` reads a slow source on read threads.)
THREADED = [
    "aioloader._iteration.threaded",
    "aioloader._scheduling.scheduler",
    "aioloader._executors.tuning",
    "signal",
]


def test_worker_count_0_runs_without_the_threaded_engine() -> None:
    code = "import aioloader\n" + SYNC_RUN.format(workers=0)
    assert [m for m in THREADED if m in loaded_after_all(code)] == []


def test_workers_load_the_threaded_engine_with_their_first_engine() -> None:
    assert [m for m in THREADED if m in loaded_after_all("import aioloader")] == []
    code = "import aioloader\n" + SYNC_RUN.format(workers=2)
    assert [m for m in THREADED if m in loaded_after_all(code)] == THREADED


def test_the_device_engine_loads_with_a_device_put_only() -> None:
    code = "import aioloader\n" + SYNC_RUN.format(workers=2)
    assert "aioloader._device.device_engine" not in loaded_after_all(code)


def loaded_after_all(code: str) -> list[str]:
    """Every module in `sys.modules` after running `code` in a fresh interpreter."""
    return last_line_after(code, "print(' '.join(sorted(sys.modules)))").split()


def test_async_for_loads_asyncio() -> None:
    code = (
        "import asyncio, aioloader\n"
        "loader = aioloader.DataLoader(data_source=aioloader.RangeDataSource(0, 10, 1), "
        "sampler=aioloader.SequentialSampler(10), worker_count=2)\n"
        "async def main():\n"
        "    return [int(x) async for x in loader]\n"
        "assert asyncio.run(main()) == list(range(10))"
    )
    assert "asyncio" in loaded_after(code)


def test_a_storage_source_loads_when_named() -> None:
    import aioloader
    from aioloader._sources.parquet import ParquetDataSource

    assert aioloader.ParquetDataSource is ParquetDataSource
    assert set(aioloader.__all__) <= set(dir(aioloader))
    assert "asyncio" in loaded_after("from aioloader import FilesDataSource")


# What reading local files needs none of: an event loop, a thread pool for object
# storage, a compiler's subprocess (the C hash is built once per machine, then loaded).
STORAGE_MACHINERY = ["asyncio", "concurrent.futures", "subprocess", "shutil", "logging", "pandas"]


def newly_loaded(before: str, code: str) -> set[str]:
    """Which of STORAGE_MACHINERY `code` loads that `before` (run first) has not."""
    report = f"print(' '.join(sorted(set({STORAGE_MACHINERY!r}) & set(sys.modules))))"
    after = set(last_line_after(before + "\n" + code, report).split())
    return after - set(last_line_after(before, report).split())


def test_a_source_of_local_files_loads_no_storage_machinery(tmp_path: Path, array_record_dir: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": [1, None], "tokens": [[1, 2], [3, None]]}), parquet)
    array_record = next(array_record_dir.glob("*"))
    before = "import numpy, pyarrow.parquet"  # what pyarrow loads itself is not counted
    for source in (f"ParquetDataSource({str(parquet)!r})", f"ArrayRecordDataSource({str(array_record)!r})"):
        code = f"import aioloader\nsource = aioloader.{source}\nsource[0]\nsource.close()"
        assert newly_loaded(before, code) == set(), source


def test_an_unknown_name_is_an_attribute_error() -> None:
    import aioloader

    with pytest.raises(AttributeError, match="module 'aioloader' has no attribute 'NoSuchSource'"):
        _ = aioloader.NoSuchSource  # type: ignore[attr-defined]
