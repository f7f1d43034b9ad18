"""Random-access read throughput of the data sources, through the loader and in plain loops.

    python -m benchmarks.sources_bench [--records N] [--files N] [--repeats R] [--quick] [--only PART]

Every source reads the same records in the same global shuffle:

* ArrayRecord: N records of 1 KiB written with the writer's default options,
  read by the `array_record` data source in a plain loop (GIL build only: it
  has no free-threaded wheels), then by ArrayRecordDataSource with each
  reader this interpreter has.
* Parquet: N rows (int, float, string, list of 16 ints; row groups of 1000),
  read by pyarrow in a plain loop (`read_table`, then `slice(k, 1).to_pylist()`
  per key), then by ParquetDataSource.
* Checksums: the built-in ArrayRecord reader and ParquetDataSource alone,
  with `verify_checksums` on and off: ArrayRecord in Grain's layout (a
  record per chunk) and in the writer's default one (chunks of up to 65,536
  records, verified once each, then cached); Parquet written with page
  checksums.
* HighwayHash: MB/s of one long message (a chunk of a file written with a
  large `group_size`), hashed by the C library and by the NumPy fallback;
  and of several threads hashing at once (the C call releases the GIL).
* Files: N files of 4 KiB, each read after a simulated 2 ms latency, by a
  sequential loop, then by FilesDataSource through the loader (16 reads in
  flight, the default `ReadOptions.num_threads`). The latency is an awaited
  wait (an async storage client) or a blocking sleep in the executor thread
  where aiofiles makes its blocking calls (a slow disk).

Our sources are timed alone (`__getitems__` over chunks of 64 keys, in this
thread), then through DataLoader at 0, 1, 2 and 4 workers, twice: with a
shuffled IndexSampler, and with the keys shuffled in advance (a sequential
sampler over a permuted view of the source) so that the sampler's own cost
is left out. "loader alone" rows read a RangeDataSource the same ways: the
loader's ceiling on this machine.

Each figure is the median of `--repeats` passes, each with a fresh source.
The ArrayRecord file is written by the official writer: on a build where it
does not install, by the interpreter that AIOLOADER_GIL_PYTHON names.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from aioloader import (
    ArrayRecordDataSource,
    DataLoader,
    FilesDataSource,
    IndexSampler,
    ParquetDataSource,
    RangeDataSource,
    SequentialSampler,
)
from aioloader._sources.arrayrecord import highwayhash, highwayhash_numpy
from aioloader._sources.arrayrecord.source import array_record_installed

WORKERS = (0, 1, 2, 4)
LATENCY = 0.002
REPO = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    source: str
    how: str
    records: int
    seconds: float


def timed(source: str, how: str, records: int, run: Callable[[], object], repeats: int) -> Row:
    """The median time of `repeats` calls of `run`, each reading `records` records."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return Row(source, how, records, statistics.median(times))


def shuffled_keys(count: int) -> list[int]:
    return IndexSampler(count, shuffle=True, seed=0, num_epochs=1).record_keys(0, count)


class Permuted:
    """`source` seen through a fixed shuffle: key k is `source[order[k]]`."""

    def __init__(self, source: Any, order: Sequence[int]) -> None:
        self.source, self.order = source, order

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, key: int) -> Any:
        return self.source[self.order[key]]

    def __getitems__(self, keys: Sequence[int]) -> list[Any]:
        order = self.order
        return list(self.source.__getitems__([order[key] for key in keys]))


class Reopening:
    """Pickles as its class and paths, so that a spawned worker process (Grain's) opens the files again.

    Our sources hold locks and open files, so they do not pickle; the
    `arrayrecord` and `parquet` workloads of `python -m benchmarks` read
    these subclasses so that process-based loaders can take them.
    """

    paths: tuple[str, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.paths,)


class ArrayRecordFiles(Reopening, ArrayRecordDataSource):
    """ArrayRecordDataSource (default reader and cache) that pickles as its paths."""


class ParquetFiles(Reopening, ParquetDataSource):
    """ParquetDataSource (every column, default cache) that pickles as its paths."""


def through_loader(make_source: Callable[[], Any], sampler: IndexSampler, workers: int) -> None:
    for _ in DataLoader(data_source=make_source(), sampler=sampler, worker_count=workers):
        pass


def alone(make_source: Callable[[], Any], keys: list[int]) -> None:
    source = make_source()
    for start in range(0, len(keys), 64):
        source.__getitems__(keys[start : start + 64])


def source_rows(name: str, label: str, make_source: Callable[[], Any], count: int, repeats: int) -> list[Row]:
    """Our source alone, then through the loader with both samplers at each worker count."""
    keys = shuffled_keys(count)
    rows = [
        timed(name, f"{label} alone, `__getitems__` by 64", count, partial(alone, make_source, keys), repeats)
    ]
    shuffled = IndexSampler(count, shuffle=True, seed=0, num_epochs=1)
    for workers in WORKERS:
        run = partial(through_loader, make_source, shuffled, workers)
        rows.append(timed(name, f"loader, {label}, shuffled sampler, {workers} workers", count, run, repeats))
    in_advance = partial(Permuted, order=keys)
    for workers in WORKERS:
        run = partial(through_loader, lambda: in_advance(make_source()), SequentialSampler(count), workers)
        rows.append(
            timed(name, f"loader, {label}, keys shuffled in advance, {workers} workers", count, run, repeats)
        )
    return rows


# ArrayRecord


def write_array_record(path: str, count: int, options: str = "") -> None:
    """`count` records of 1 KiB, half random, half repetitive, with the writer's `options`
    (its defaults when empty)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    rng = random.Random(0)
    writer = ArrayRecordWriter(path, options) if options else ArrayRecordWriter(path)
    for i in range(count):
        writer.write(rng.randbytes(1024) if i % 2 else bytes([i % 251]) * 1024)
    writer.close()


def make_array_record(path: Path, count: int, options: str = "") -> bool:
    """Write the file with the official writer: here, or where it does not install, in the
    interpreter that AIOLOADER_GIL_PYTHON names. False when neither can."""
    if array_record_installed():
        write_array_record(str(path), count, options)
        return True
    python = os.environ.get("AIOLOADER_GIL_PYTHON")
    if not python:
        return False
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"} | {"PYTHONPATH": str(REPO)}
    command = [python, "-m", "benchmarks.sources_bench", "--write", str(path), "--records", str(count)]
    command += ["--options", options] if options else []
    subprocess.run(command, cwd=REPO, env=env, check=True)
    return True


def bench_array_record(directory: Path, count: int, repeats: int) -> list[Row]:
    path = directory / "records.array_record"
    if not make_array_record(path, count):
        print("ArrayRecord skipped: no array_record writer here, and AIOLOADER_GIL_PYTHON is not set.")
        return []
    rows = []
    if array_record_installed():
        from array_record.python.array_record_data_source import ArrayRecordDataSource as Official

        def plain(keys: list[int]) -> None:
            source = Official([str(path)])
            for key in keys:
                source[key]

        run = partial(plain, shuffled_keys(count))
        rows.append(timed("ArrayRecord", "array_record data source, plain loop", count, run, repeats))
    for reader in ("array_record", "builtin") if array_record_installed() else ("builtin",):
        make = partial(ArrayRecordDataSource, path, reader=reader)
        rows += source_rows("ArrayRecord", f"reader={reader}", make, count, repeats)
    return rows


# Parquet


def make_parquet(path: Path, count: int, **options: Any) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = np.arange(count)
    table = pa.table(
        {
            "id": ids,
            "score": (ids / 7).astype(np.float32),
            "name": [f"record {i}" for i in range(count)],
            "tokens": pa.array([list(range(i, i + 16)) for i in range(count)], pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, path, row_group_size=1000, **options)


def bench_parquet(directory: Path, count: int, repeats: int) -> list[Row]:
    import pyarrow.parquet as pq

    path = directory / "rows.parquet"
    make_parquet(path, count)

    def plain(keys: list[int]) -> None:
        table = pq.read_table(path)
        for key in keys:
            table.slice(key, 1).to_pylist()

    run = partial(plain, shuffled_keys(count))
    rows = [timed("Parquet", "pyarrow read_table + slice(k, 1).to_pylist(), plain loop", count, run, repeats)]
    return rows + source_rows(
        "Parquet", "ParquetDataSource", partial(ParquetDataSource, path), count, repeats
    )


# Checksums


def bench_checksums(directory: Path, count: int, repeats: int) -> list[Row]:
    """Each source alone, `__getitems__` by 64 in a global shuffle, verifying checksums or not."""
    keys, rows = shuffled_keys(count), []
    for layout, options in (("a record per chunk", "group_size:1"), ("default layout", "")):
        path = directory / f"checksums-{options or 'default'}.array_record"
        if make_array_record(path, count, options):
            for verify in (True, False):
                make = partial(ArrayRecordDataSource, path, reader="builtin", verify_checksums=verify)
                label = f"reader=builtin, {layout}, verify_checksums={verify}"
                rows.append(timed("checksums", label, count, partial(alone, make, keys), repeats))
    path = directory / "checksums.parquet"
    make_parquet(path, count, write_page_checksum=True)
    for verify in (True, False):
        make = partial(ParquetDataSource, path, verify_checksums=verify)
        label = f"ParquetDataSource, page checksums written, verify_checksums={verify}"
        rows.append(timed("checksums", label, count, partial(alone, make, keys), repeats))
    return rows


# HighwayHash

HASH_BYTES = {"C": 16 << 20, "NumPy": 1 << 20}  # per message: the fallback is far slower


def bench_highwayhash(repeats: int) -> list[Row]:
    """One long message at a time, through `hash64_many` (C) and the NumPy fallback;
    then the C library from 1, 2 and 4 threads at once. A row's "records" are MB."""
    rows = []
    if highwayhash.implementation() == "C":
        rows.append(hashed("C (compiled on first use), 1 thread", highwayhash.hash64_many, 1, repeats))
        for threads in (2, 4):
            how = f"C, {threads} threads at once, a message each"
            rows.append(hashed(how, highwayhash.hash64_many, threads, repeats))
    else:
        print("HighwayHash: the C library did not build here (see the warning above); NumPy only.")
    numpy_hash = partial(highwayhash_numpy.hash64_many, key=highwayhash.RIEGELI_KEY)
    rows.append(hashed("NumPy fallback (no C compiler), 1 thread", numpy_hash, 1, repeats))
    return rows


def hashed(how: str, hash_many: Callable[[list[bytes]], list[int]], threads: int, repeats: int) -> Row:
    size = HASH_BYTES["NumPy" if "NumPy" in how else "C"]
    message = random.Random(0).randbytes(size)
    start = threading.Barrier(threads)

    def hash_one(_: int) -> None:
        start.wait()
        hash_many([message])

    def run() -> None:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(hash_one, range(threads)))

    return timed("HighwayHash, MB", how, threads * size // 2**20, run, repeats)


# Files


class AwaitedLatencyFiles(FilesDataSource):
    """Each read first awaits 2 ms, as an async storage client would."""

    async def aget(self, key: int) -> bytes:
        await asyncio.sleep(LATENCY)
        return await super().aget(key)


class BlockingLatencyFiles(FilesDataSource):
    """Each read first blocks a thread of the loop's default executor for 2 ms, as a slow disk would."""

    async def aget(self, key: int) -> bytes:
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, LATENCY)
        return await super().aget(key)


def bench_files(directory: Path, count: int, repeats: int) -> list[Row]:
    paths = [directory / f"file-{i:05}.bin" for i in range(count)]
    for i, path in enumerate(paths):
        path.write_bytes(bytes([i % 251]) * 4096)

    def sequential() -> None:
        for path in paths:
            time.sleep(LATENCY)
            path.read_bytes()

    async def consume(loader: DataLoader) -> None:
        async for _ in loader:
            pass

    def async_for(workers: int) -> None:
        loader = DataLoader(
            data_source=AwaitedLatencyFiles(paths),
            sampler=IndexSampler(count, num_epochs=1),
            worker_count=workers,
        )
        asyncio.run(consume(loader))

    rows = [timed("Files", "sequential loop, 2 ms latency", count, sequential, repeats)]
    for name, kind in (("awaited", AwaitedLatencyFiles), ("blocking", BlockingLatencyFiles)):
        for workers in (0, 2):
            run = partial(through_loader, partial(kind, paths), IndexSampler(count, num_epochs=1), workers)
            rows.append(
                timed("Files", f"loader `for`, {name} 2 ms latency, {workers} workers", count, run, repeats)
            )
    for workers in (0, 2):
        how = f"loader `async for`, awaited 2 ms latency, {workers} workers"
        rows.append(timed("Files", how, count, partial(async_for, workers), repeats))
    return rows


# The loader alone


def bench_loader_alone(count: int, repeats: int) -> list[Row]:
    rows = [
        timed("loader alone", "plain loop over RangeDataSource", count, partial(list, range(count)), repeats)
    ]
    return rows + source_rows(
        "loader alone", "RangeDataSource", partial(RangeDataSource, 0, count), count, repeats
    )


# Report


def table(rows: list[Row]) -> str:
    """A Markdown table; each row's speed is also given relative to its source's first row."""
    lines = [
        "| source | how | records/s | ms per pass | vs first row |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    first: dict[str, float] = {}
    for row in rows:
        speed = row.records / row.seconds
        base = first.setdefault(row.source, speed)
        lines.append(
            f"| {row.source} | {row.how} | {figure(speed)} | {row.seconds * 1000:,.1f} "
            f"| {figure(speed / base, 2)}x |"
        )
    return "\n".join(lines)


def figure(value: float, decimals: int = 0) -> str:
    """`value` with `decimals` decimals, or three significant digits where that shows more."""
    return f"{value:,.{decimals}f}" if abs(value) * 10**decimals >= 10 else f"{value:.3g}"


def banner() -> str:
    build = "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "GIL"
    gil = "GIL on" if getattr(sys, "_is_gil_enabled", lambda: True)() else "GIL off"
    return f"CPython {sys.version.split()[0]} ({build} build, {gil}), {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Random-access read throughput of the data sources.")
    parser.add_argument(
        "--records", type=int, default=10_000, help="records in the ArrayRecord and Parquet files"
    )
    parser.add_argument("--files", type=int, default=400, help="files for FilesDataSource")
    parser.add_argument("--repeats", type=int, default=3, help="passes per figure (the median is shown)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: little data, one pass")
    parser.add_argument(
        "--only", action="append", choices=sorted(PARTS), help="run only this part (may be repeated)"
    )
    parser.add_argument("--write", metavar="PATH", help=argparse.SUPPRESS)  # writes the ArrayRecord file
    parser.add_argument("--options", default="", help=argparse.SUPPRESS)  # the writer's, with --write
    args = parser.parse_args(argv)
    if args.write:
        write_array_record(args.write, args.records, args.options)
        return
    if args.quick:
        args.records, args.files, args.repeats = 1000, 40, 1
    print(f"Data sources, random access: {banner()}; median of {args.repeats} passes.\n", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="aioloader-bench-") as tmp:
        for name, part in PARTS.items():
            if not args.only or name in args.only:
                rows += part(Path(tmp), args)
    print(table(rows))


# Each part of the benchmark, by the name `--only` takes.
PARTS: dict[str, Callable[[Path, argparse.Namespace], list[Row]]] = {
    "arrayrecord": lambda tmp, args: bench_array_record(tmp, args.records, args.repeats),
    "parquet": lambda tmp, args: bench_parquet(tmp, args.records, args.repeats),
    "checksums": lambda tmp, args: bench_checksums(tmp, args.records, args.repeats),
    "highwayhash": lambda tmp, args: bench_highwayhash(args.repeats),
    "files": lambda tmp, args: bench_files(tmp, args.files, args.repeats),
    "loader": lambda tmp, args: bench_loader_alone(args.records, args.repeats),
}


if __name__ == "__main__":
    main()
