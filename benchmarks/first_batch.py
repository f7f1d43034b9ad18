"""Time from `import aioloader` to the first batch, in this fresh process, as a user's script pays it.

    python -m benchmarks.first_batch --workload trivial --workers 2

NumPy is imported and the workload's source and transform built first (the
dataset's cost, whatever the loader); the clock starts just before `import
aioloader` and stops when the first batch is in hand. This module imports
nothing else before the clock (no benchmarks.loaders, and asyncio only for an
async source, whose own module would import it), so that the import is
measured as cold as a script's. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from benchmarks.workloads import IN_FLIGHT, PREFETCH, Workload


def aioloader_loader(workload: Workload, source: Any, transform: Any, workers: int | str, n: int) -> Any:
    """aioloader's DataLoader as the suite runs it (here, so that this module imports no more)."""
    import aioloader as al

    return al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(n, shuffle=True, seed=0, num_epochs=1),
        operations=[transform, al.Batch(workload.batch_size, batch_fn=workload.collate)],
        worker_count=workers,
        read_options=al.ReadOptions(num_threads=IN_FLIGHT, prefetch_buffer_size=PREFETCH),
    )


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_batch", description=description)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--records", type=int, help="default: the workload's own count")
    args = parser.parse_args(argv)
    from benchmarks.workloads import WORKLOADS  # and numpy: the figure leaves its import out

    workload = WORKLOADS[args.workload]
    n = args.records or workload.records
    source, transform = workload.make_source(n), workload.make_transform()
    if workload.is_async:
        # An async source's own module imports asyncio (or a client built on it), as any
        # code with `await` in it does: the loader does not pay for it. A sync source
        # leaves it out, and a loader that imported it would pay for it here.
        import asyncio  # noqa: F401

    preloaded = sorted(m for m in ("asyncio", "aioloader") if m in sys.modules)
    started = time.perf_counter()
    import aioloader  # noqa: F401

    imported = time.perf_counter()
    with iter(aioloader_loader(workload, source, transform, args.workers, n)) as batches:
        next(batches)
        first = time.perf_counter()
    result = {
        "workload": workload.name,
        "workers": args.workers,
        "import_s": imported - started,
        "first_batch_s": first - imported,
        "start_s": first - started,
        "loaded_before": preloaded,  # modules the workload itself imported before the clock
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
