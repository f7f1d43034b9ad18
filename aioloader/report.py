"""`python -m aioloader.report`: where a loader's time goes, from the command line.

    python -m aioloader.report statistics.json
    python -m aioloader.report my_module:make_loader --batches 200 [--json]

The first form prints the summary of a snapshot saved with
`iterator.statistics().to_json()` (or of each in the list that `--json` writes
for a dataset of several parallel parts). The second imports `my_module` (the
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
        parts = _statistics(args.target, args.batches)
    except Unusable as error:
        print(f"aioloader.report: {args.target}: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(parts[0].to_json() if len(parts) == 1 else "[" + ",".join(p.to_json() for p in parts) + "]")
    else:
        print("\n\n".join(part.summary() for part in parts))
    return 0


class Unusable(Exception):
    """The target cannot be used: the message says why (the command exits with status 2)."""


def _statistics(target: str, batches: int) -> list[LoaderStatistics]:
    """The snapshot saved in `target`, or those of the loader `target` makes (an
    IterDataset gives one per parallel part)."""
    if os.path.exists(target) or ":" not in target:
        try:
            with open(target, encoding="utf-8") as saved:
                return _snapshots(saved.read())
        except (OSError, ValueError) as error:
            raise Unusable(error) from None
    return _measure(_loader(target), batches)


def _snapshots(text: str) -> list[LoaderStatistics]:
    """The snapshot in `text`, or the list of them that `--json` writes for a dataset of
    several parallel parts."""
    import json

    if not text.lstrip().startswith("["):
        return [LoaderStatistics.from_json(text)]
    try:
        parts = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not the JSON of LoaderStatistics.to_json(): {error!r}") from None
    if not parts:
        raise ValueError("not the JSON of LoaderStatistics.to_json(): an empty list")
    return [LoaderStatistics.from_json(json.dumps(part)) for part in parts]


def _loader(target: str) -> Any:
    """`module:function` imported and called; whatever fails on the way is `Unusable`."""
    module_name, _, function_name = target.partition(":")
    sys.path.insert(0, os.getcwd())  # as `python -m` does: the user's modules next to them
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # the user's module: a SyntaxError, an error at import time
        raise Unusable(f"importing {module_name!r} failed: {type(error).__name__}: {error}") from None
    if not hasattr(module, function_name):
        raise Unusable(f"module {module_name!r} has no attribute {function_name!r}")
    function = getattr(module, function_name)
    if not callable(function):
        raise Unusable(f"{function_name!r} is not a function, got {function!r}")
    try:
        return function()
    except Exception as error:
        raise Unusable(f"calling {function_name}() failed: {type(error).__name__}: {error}") from None


def _measure(loader: Any, batches: int) -> list[LoaderStatistics]:
    try:
        iterator = iter(loader)
    except TypeError as error:  # None, an int: "... is not iterable"
        raise Unusable(f"the function must return a DataLoader or a dataset: {error}") from None
    statistics_of = getattr(iterator, "statistics", None)
    if not callable(statistics_of):
        raise Unusable(f"the function must return a DataLoader or a dataset, got {loader!r:.200}")
    taken = 0
    try:
        for _ in itertools.islice(iterator, batches):
            taken += 1
        statistics = statistics_of()
    except Exception as error:
        raise Unusable(f"the loader failed after {taken} outputs: {type(error).__name__}: {error}") from None
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
    return list(statistics) if isinstance(statistics, list) else [statistics]


if __name__ == "__main__":
    sys.exit(main())
