"""Run one (loader, workload, workers) configuration in this fresh process and print its numbers as JSON.

    python -m benchmarks.child --loader aioloader --workload cpu --workers 2
    python -m benchmarks.child --probe     # the interpreter and which loaders import

The clock starts just before the loader is constructed (the loader's modules
are imported and the source and the transform built first: they are the
program's and the dataset's, the same whatever the loader) and stops at the
last batch. Measured here: the time to the first batch, the
throughput, the records and their checksum, and the CPU time of the whole
process tree (this process, plus its worker processes: reaped ones through
`RUSAGE_CHILDREN`, live ones through psutil). The runner samples the tree's
memory from outside, so that no sampling thread runs in here.

On a free-threaded build the run fails unless the GIL stayed off throughout
(an extension module without free-threading support turns it back on).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import json
import resource
import sys
import sysconfig
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from benchmarks.loaders import LOADERS, Loader
from benchmarks.workloads import WORKLOADS, Workload

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def gil_enabled() -> bool:
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


class Tally:
    """Counts records and sums checksums as batches arrive; notes when the first one came."""

    def __init__(self, workload: Workload, started: float) -> None:
        self.workload, self.started = workload, started
        self.records = self.batches = self.first_records = 0
        self.checksum = 0.0
        self.first: float | None = None

    def add(self, batch: Any) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.first_records = len(batch)
        self.records += len(batch)
        self.batches += 1
        self.checksum += self.workload.checksum(batch)


def consume(batches: Iterator[Any] | AsyncIterator[Any], tally: Tally) -> None:
    if isinstance(batches, AsyncIterator):

        async def drain(source: AsyncIterator[Any]) -> None:
            async for batch in source:
                tally.add(batch)

        asyncio.run(drain(batches))
    else:
        for batch in batches:
            tally.add(batch)


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def live_descendants_cpu() -> float:
    """CPU seconds of descendant processes still running (worker pools not yet reaped)."""
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return 0.0
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def run(loader: Loader, workload: Workload, workers: int, n: int) -> dict[str, Any]:
    imported = time.perf_counter()
    for module in loader.preload:
        importlib.import_module(module)
    imported = time.perf_counter() - imported
    source = workload.make_source(n)
    transform = workload.make_transform()
    gc.collect()
    self0, children0 = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    tally = Tally(workload, started)
    batches = loader.batches(workload, source, transform, workers, n)
    consume(batches, tally)
    finished = time.perf_counter()
    gil_after_run = gil_enabled()
    live = live_descendants_cpu()
    close = getattr(batches, "close", None)  # generators: leave their `with`, join the workers
    if close is not None and not isinstance(batches, AsyncIterator):
        close()
    del batches
    gc.collect()
    cpu_self = cpu_seconds(resource.RUSAGE_SELF) - self0
    cpu_children = cpu_seconds(resource.RUSAGE_CHILDREN) - children0 + live
    first = tally.first if tally.first is not None else finished
    steady = finished - first
    return {
        "loader": loader.name,
        "workload": workload.name,
        "workers": workers,
        "expected": n,
        "records": tally.records,
        "batches": tally.batches,
        "checksum": tally.checksum,
        "import_s": imported,
        "wall_s": finished - started,
        "first_batch_s": first - started,
        "rate": tally.records / (finished - started),
        "steady_rate": (tally.records - tally.first_records) / steady if steady > 0 else 0.0,
        "cpu_s": cpu_self + cpu_children,
        "cpu_self_s": cpu_self,
        "cpu_children_s": cpu_children,
        "maxrss_self_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "gil_enabled": gil_after_run,
        "settings": loader.settings(workload, workers),
    }


def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe() -> dict[str, Any]:
    """The interpreter, and the loaders whose modules import here."""
    importable: dict[str, bool] = {}
    for loader in LOADERS.values():
        module = loader.requires
        if module is None or module in importable:
            continue
        try:
            importlib.import_module(module)
            importable[module] = True
        except Exception:
            importable[module] = False
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "free_threaded": FREE_THREADED,
        "gil_enabled": gil_enabled(),
        "loaders": [
            name for name, loader in LOADERS.items() if loader.requires is None or importable[loader.requires]
        ],
        "versions": {d: version_of(d) for d in ("numpy", "grain", "torch", "spdl", "psutil")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.child", description=__doc__.split("\n")[0])
    parser.add_argument("--probe", action="store_true", help="print the interpreter and the loaders")
    parser.add_argument("--loader", choices=sorted(LOADERS))
    parser.add_argument("--workload", choices=sorted(WORKLOADS))
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--records", type=int, help="default: the workload's own count")
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe()))
        return 0
    if args.loader is None or args.workload is None:
        parser.error("--loader and --workload are required (or --probe)")
    workload = WORKLOADS[args.workload]
    result = run(LOADERS[args.loader], workload, args.workers, args.records or workload.records)
    print(json.dumps(result))
    if FREE_THREADED and result["gil_enabled"]:
        print("error: the GIL was enabled during a free-threaded run", file=sys.stderr)
        return 3
    if result["records"] != result["expected"]:
        print(f"error: delivered {result['records']} records of {result['expected']}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
