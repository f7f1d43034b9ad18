"""`python -m aioloader.report`: where a loader's time goes, from the command line.

    python -m aioloader.report statistics.json
    python -m aioloader.report my_module:make_loader --batches 200 [--json]

The first form prints the summary of a snapshot saved with
`iterator.statistics().to_json()`. The second imports `my_module` (the
current directory is searched first), calls `make_loader()` with no
arguments, which returns a `DataLoader` (or anything whose iterator has
`statistics()`), takes `--batches` outputs from it and prints the summary of
what they took: each stage's figures, the stage that limits throughput and
what to change. `--json` prints the snapshot's JSON instead, to save and
summarise later. A file or function that cannot be used exits with status 2
and a message that names it.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import sys
from typing import Any

from aioloader._observability.statistics import LoaderStatistics


def main(argv: list[str] | None = None) -> int:
    """Print the summary (or `--json`) of a saved snapshot or of a loader run for N outputs."""
    parser = argparse.ArgumentParser(prog="python -m aioloader.report", description=__doc__.split("\n")[0])
    parser.add_argument("target", help="a JSON file from statistics().to_json(), or module:function")
    parser.add_argument("--batches", type=int, default=100, help="outputs to take from the loader")
    parser.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    args = parser.parse_args(argv)
    if args.batches < 1:
        parser.error(f"--batches must be at least 1, got {args.batches}")
    try:
        statistics = _statistics(args.target, args.batches)
    except (OSError, ValueError, ImportError, AttributeError, TypeError) as error:
        print(f"aioloader.report: {args.target}: {error}", file=sys.stderr)
        return 2
    print(statistics.to_json() if args.json else statistics.summary())
    return 0


def _statistics(target: str, batches: int) -> LoaderStatistics:
    if os.path.exists(target) or ":" not in target:
        with open(target, encoding="utf-8") as saved:
            return LoaderStatistics.from_json(saved.read())
    return _measure(_loader(target), batches)


def _loader(target: str) -> Any:
    """`module:function` imported and called."""
    module_name, _, function_name = target.partition(":")
    sys.path.insert(0, os.getcwd())  # as `python -m` does: the user's modules next to them
    function = getattr(importlib.import_module(module_name), function_name)
    if not callable(function):
        raise TypeError(f"{function_name!r} is not a function, got {function!r}")
    return function()


def _measure(loader: Any, batches: int) -> LoaderStatistics:
    iterator = iter(loader)
    if not callable(getattr(iterator, "statistics", None)):
        raise TypeError(
            f"the function must return a DataLoader (an iterable with statistics()), got {loader!r}"
        )
    try:
        for _ in itertools.islice(iterator, batches):
            pass
        statistics: LoaderStatistics = iterator.statistics()
        return statistics
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


if __name__ == "__main__":
    sys.exit(main())
