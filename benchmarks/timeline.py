"""Throughput per stage over time, for one benchmark run: sampled from `statistics()`, drawn with matplotlib.

    python -m benchmarks.timeline --workload cpu --workers auto --out benchmarks/results

runs aioloader on one workload in this process, takes `iterator.statistics()`
every `PERIOD` seconds from a thread of its own (statistics may be read from
any thread while the loader runs), and writes `timeline-<workload>.json`
(the samples) and `timeline-<workload>.png`: items per second of each stage
between two samples, and the worker count in use. The runner (`./dev bench`)
makes one for the `cpu` workload on the first interpreter it runs.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.loaders import aioloader_loader
from benchmarks.workloads import WORKLOADS

PERIOD = 0.05


def sample(workload_name: str, workers: int | str, records: int) -> list[dict[str, Any]]:
    """Run the workload to the end; the statistics every `PERIOD` seconds, as dicts."""
    workload = WORKLOADS[workload_name]
    loader = aioloader_loader(
        workload, workload.make_source(records), workload.make_transform(), workers, records
    )
    samples: list[dict[str, Any]] = []
    done = threading.Event()
    with iter(loader) as batches:

        def watch() -> None:
            while not done.wait(PERIOD):
                samples.append(_as_dict(batches.statistics()))

        watcher = threading.Thread(target=watch, name="timeline")
        watcher.start()
        try:
            for _ in batches:
                pass
        finally:
            done.set()
            watcher.join()
        samples.append(_as_dict(batches.statistics()))
    return samples


def _as_dict(statistics: Any) -> dict[str, Any]:
    return {
        "elapsed": statistics.elapsed_seconds,
        "workers": statistics.worker_count,
        "items": {stage.name: stage.items for stage in statistics.stages},
    }


def plot(samples: list[dict[str, Any]], title: str, path: Path) -> None:
    """Items per second of each stage between samples, over time, and the worker count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rates, workers) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, height_ratios=[3, 1])
    times = [s["elapsed"] for s in samples]
    for stage in samples[-1]["items"]:
        counts = [s["items"].get(stage, 0) for s in samples]
        steps = [
            (b - a) / (t1 - t0) if t1 > t0 else 0.0
            for a, b, t0, t1 in zip(counts, counts[1:], times, times[1:], strict=False)
        ]
        rates.plot(times[1:], steps, label=stage)
    rates.set_ylabel("items/s")
    rates.set_title(title)
    rates.legend(fontsize=8)
    workers.step(times, [s["workers"] for s in samples], where="post")
    workers.set_ylabel("workers")
    workers.set_xlabel("seconds since the loader started")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timeline", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="cpu", choices=sorted(WORKLOADS))
    parser.add_argument("--workers", default="auto", help='an int or "auto"')
    parser.add_argument("--records", type=int, help="default: the workload's own count")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    workers: int | str = args.workers if args.workers == "auto" else int(args.workers)
    records = args.records or WORKLOADS[args.workload].records
    started = time.perf_counter()
    samples = sample(args.workload, workers, records)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"timeline-{args.workload}"
    stem.with_suffix(".json").write_text(json.dumps(samples) + "\n")
    title = f"aioloader, {args.workload}, worker_count={workers}, {records} records"
    plot(samples, title, stem.with_suffix(".png"))
    print(f"wrote {stem}.json and {stem}.png ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
