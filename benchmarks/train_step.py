"""The training example's step time fed by aioloader, against the same batches from memory.

    python -m benchmarks.train_step [--steps 300] [--repeats 3] [--workers 2] [--executor thread]

`examples/train.py`'s model, loader and step at their defaults (2 worker
threads, batches of 128 put on the devices 2 ahead). "memory": the batches
of a first pass, kept on the devices, fed again in the same order, the step
being all that runs. "aioloader": a fresh loader feeds the step as the
example does, its threads sharing the cores with the step. Each is timed
over `--steps` steps after a warm-up (the step compiled, the loader's
threads started), blocking on the last step's result; the repeats
alternate the two, and the medians are compared. Target (issue 15 item 5):
aioloader at most 5% slower.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

WARMUP = 20


def timed(train_step: Callable[..., Any], state: Any, batches: Iterator[Any], steps: int) -> float:
    """Seconds per step of `steps` steps over `batches`, after the warm-up steps."""
    for _ in range(WARMUP):
        state, loss = train_step(state, next(batches))
    loss.block_until_ready()
    started = time.perf_counter()
    for _ in range(steps):
        state, loss = train_step(state, next(batches))
    loss.block_until_ready()
    return (time.perf_counter() - started) / steps


def main(argv: Iterable[str] | None = None) -> int:
    description = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_step", description=description)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--executor", default="thread", help='"thread" or "interpreter"')
    args = parser.parse_args(None if argv is None else list(argv))
    from examples import train

    config = dataclasses.replace(train.Config(), workers=args.workers, executor=args.executor)
    train_step = train.make_train_step(config.learning_rate)
    total = WARMUP + args.steps
    with iter(train.make_loader(config)) as first_pass:
        kept = [next(first_pass) for _ in range(total)]
    fed, memory = [], []
    for _ in range(args.repeats):
        memory.append(timed(train_step, train.init_state(config), iter(kept), args.steps))
        with iter(train.make_loader(config)) as batches:
            fed.append(timed(train_step, train.init_state(config), batches, args.steps))
    ratio = statistics.median(fed) / statistics.median(memory)
    gil = "GIL on" if getattr(sys, "_is_gil_enabled", lambda: True)() else "GIL off"
    print(f"{sys.version.split()[0]} ({gil}), workers={args.workers}, executor={args.executor}:")
    print(f"  step from memory    {statistics.median(memory) * 1e3:8.3f} ms (median of {args.repeats})")
    print(f"  step fed by loader  {statistics.median(fed) * 1e3:8.3f} ms")
    print(f"  ratio {ratio:.3f} (target <= 1.05: {'met' if ratio <= 1.05 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
