"""Packing: padding fraction and packed tokens/s, aioloader's packers beside Grain's.

    python -m benchmarks.packing_bench [--records N] [--length L] [--bins B] [--repeats R]

Every packer packs the same N token sequences (dicts of `inputs` and `targets`, two
int32 arrays of one length drawn from a log-normal around L/4, at most L, tokens >= 1)
into rows of L tokens, through the Dataset API: `MapDataset.source(elements)
.to_iter_dataset()` (Grain's with `ReadOptions(num_threads=0)`: both read in the
consumer's thread), then `FirstFitPackIterDataset` / `BestFitPackIterDataset`
(`num_packing_bins=B`) or `ConcatThenSplitIterDataset`, iterated to the end.

* padding: the share of the rows' `inputs` slots that hold no token
  (`inputs_segment_ids == 0`), what a trainer computes on for nothing;
* tokens/s: the sequences' tokens (`inputs` and `targets`) over the seconds
  from `iter()` to the last row, the median of `--repeats` passes.

Grain's rows are Grain 0.2.18's (`grain.experimental`), where it installs (the
CPython 3.11 environment); aioloader's rows are checked equal to Grain's before
anything is timed, so that both columns measure the same packing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import aioloader as al

FEATURES = ("inputs", "targets")
PACKERS = ("first-fit", "best-fit", "concat-then-split")


def make_elements(count: int, length: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` sequences of lengths in [1, length], skewed short as documents are."""
    rng = np.random.default_rng(seed)
    sizes = np.clip(rng.lognormal(np.log(length / 4), 0.8, count).astype(int), 1, length)
    return [{name: rng.integers(1, 32_000, size, dtype=np.int32) for name in FEATURES} for size in sizes]


def packed(module: Any, packer: str, elements: list[Any], length: int, bins: int) -> Any:
    """The packed IterDataset of `module` (aioloader, or grain with grain.experimental)."""
    classes = module if module is al else module.experimental
    # Both read in the consumer's thread (aioloader does without prefetch), so that the
    # figures compare the packers, not Grain's 16 read threads on a busy machine.
    reading = None if module is al else module.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    ds = module.MapDataset.source(elements).to_iter_dataset(reading)
    lengths = dict.fromkeys(FEATURES, length)
    if packer == "concat-then-split":
        return classes.ConcatThenSplitIterDataset(ds, length_struct=lengths)
    kind = classes.FirstFitPackIterDataset if packer == "first-fit" else classes.BestFitPackIterDataset
    return kind(ds, length_struct=lengths, num_packing_bins=bins, seed=0)


def timed_rows(make: Callable[[], Any]) -> tuple[float, list[dict[str, Any]]]:
    """The seconds from `iter()` to the last row, and the rows."""
    dataset = make()
    start = time.perf_counter()
    rows = list(dataset)
    return time.perf_counter() - start, rows


def padding(rows: list[dict[str, Any]]) -> float:
    slots = sum(row["inputs_segment_ids"].size for row in rows)
    used = sum(int(np.count_nonzero(row["inputs_segment_ids"])) for row in rows)
    return 1.0 - used / slots


def check_equal(mine: list[dict[str, Any]], theirs: list[dict[str, Any]], packer: str) -> None:
    if len(mine) != len(theirs):
        raise AssertionError(f"{packer}: {len(mine)} rows here, {len(theirs)} in Grain")
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        for key in b:
            if not np.array_equal(a[key], b[key]):
                raise AssertionError(f"{packer}: row {i} differs from Grain's in {key!r}")


def measure(
    module: Any, packer: str, elements: list[Any], args: argparse.Namespace
) -> tuple[float, list[dict[str, Any]]]:
    """The median seconds of `args.repeats` passes, and the rows of the last."""
    times, rows = [], []
    for _ in range(args.repeats):
        seconds, rows = timed_rows(lambda: packed(module, packer, elements, args.length, args.bins))
        times.append(seconds)
    return statistics.median(times), rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--bins", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        import grain
    except ImportError:
        grain = None
    elements = make_elements(args.records, args.length)
    tokens = sum(e[name].size for e in elements for name in FEATURES)
    print(f"{sys.version.split()[0]}, {args.records} sequences, {tokens} tokens, rows of {args.length}")
    print("| packer | loader | rows | padding | tokens/s |\n| --- | --- | ---: | ---: | ---: |")
    for packer in PACKERS:
        seconds, rows = measure(al, packer, elements, args)
        if grain is not None:
            grain_seconds, grain_rows = measure(grain, packer, elements, args)
            check_equal(rows, grain_rows, packer)
        for name, (s, r) in [("aioloader", (seconds, rows))] + (
            [] if grain is None else [("grain", (grain_seconds, grain_rows))]
        ):
            print(f"| {packer} | {name} | {len(r)} | {padding(r):.2%} | {tokens / s:,.0f} |")


if __name__ == "__main__":
    main()
