"""Does the loader overlap with the training step? ms per step against max(T, L) and T + L.

    python -m benchmarks.overlap_bench [--pairs 10:5,5:10] [--work python,wait] [--steps 40] [--repeats 5]
    python -m benchmarks.overlap_bench --quick

The training step takes T ms of "device" time: a jitted chain of
(128 x 256) @ (256 x 256) matmuls on JAX's CPU backend, held to one core
(XLA_FLAGS below). The consumer waits for each step's loss before it asks for
the next batch, as a loop that logs every loss does, so any overlap comes from
the loader working ahead. The loader takes L ms per batch, after `Batch` and
before `DevicePut`, of one of two kinds of work:

* `python`: a pure-Python loop (it holds the GIL on the GIL build), which
  needs a core of its own to overlap;
* `wait`: a blocking wait (`time.sleep`, like a read from slow storage),
  which needs no core: it shows the loader's own overlap, apart from how many
  cores the machine really has.

Each (T, L) pair runs as `for` at worker_count=0 (the loader runs in the
caller's thread when a batch is asked for: nothing overlaps, the T + L
baseline), `for` and `async for` (the step awaited through
`asyncio.to_thread`) at worker_count=2, where the workers and the device
thread prepare the next batches while the step runs, and "plain thread": the
same work without aioloader, one thread doing L and a `device_put` per batch,
two batches ahead, which is the most overlap the machine allows.

T and L are measured alone too (the step on a batch already on the device;
the loader at worker_count=0 without a step). Every figure is the median of
`--repeats` runs of `--steps` steps after a warm-up. Each run first waits for
other processes to go quiet and is run again (up to 3 times) if they used
more than a quarter of a core meanwhile; the table shows the most cores they
used during a run that was kept.
"""

from __future__ import annotations

import os

# One core for the "device", set before JAX starts, so that its threads and the loader's
# do not fight over the same cores in ways that change from run to run.
os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"

import argparse
import asyncio
import queue
import resource
import statistics
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from aioloader import Batch, DataLoader, DevicePut, IndexSampler, MapTransform, RangeDataSource

BATCH, WIDTH = 128, 256
Step = Callable[[jax.Array], jax.Array]
Work = Callable[[], object]


# --- Other processes ------------------------------------------------------------------


def machine_busy_seconds() -> float:
    """CPU seconds every process has used since boot (from /proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait


def own_busy_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class OthersLoad:
    """Cores that other processes kept busy from creation to `cores()`: a run during which
    they were busy measured the machine, not the loader."""

    def __init__(self) -> None:
        self.started = (time.monotonic(), machine_busy_seconds(), own_busy_seconds())

    def cores(self) -> float:
        wall, machine, own = self.started
        others = (machine_busy_seconds() - machine) - (own_busy_seconds() - own)
        return max(0.0, others / max(time.monotonic() - wall, 1e-9))


PATIENCE = [15.0]  # --patience


def wait_for_quiet(threshold: float = 0.1) -> None:
    """Wait, up to `--patience` seconds, until other processes use less than `threshold` cores."""
    deadline = time.monotonic() + PATIENCE[0]
    while time.monotonic() < deadline:
        load = OthersLoad()
        time.sleep(0.2)
        if load.cores() < threshold:
            return


# --- The two sides: the loader's work and the step ----------------------------------------


def busy(loops: int) -> int:
    """Pure-Python work: small ints only, so it also scales on free-threaded builds."""
    total = 0
    for i in range(loops):
        total = (total + i * 7) % 1_000_003
    return total


def make_work(kind: str, ms: float) -> Work:
    """`ms` of work of `kind` ("python" or "wait")."""
    if kind == "wait":
        return partial(time.sleep, ms / 1000)
    loops, started = 200_000, time.perf_counter()
    busy(loops)
    return partial(busy, round(ms * loops / (1000 * (time.perf_counter() - started))))


class Row(MapTransform):
    def map(self, key: int) -> np.ndarray:
        return np.full(WIDTH, key % 7, np.float32)


class Apply(MapTransform):
    """Does `work` once per batch."""

    def __init__(self, work: Work) -> None:
        self.work = work

    def map(self, batch: np.ndarray) -> np.ndarray:
        self.work()
        return batch


def make_loader(work: Work, workers: int) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, 1 << 20),
        sampler=IndexSampler(1 << 20, shuffle=True, num_epochs=None, seed=0),
        operations=[Row(), Batch(BATCH, drop_remainder=True), Apply(work)],
        worker_count=workers,
        device_put=DevicePut(buffer_size=2),
    )


@partial(jax.jit, static_argnums=2)
def chain(w: jax.Array, x: jax.Array, k: int) -> jax.Array:
    return jax.lax.fori_loop(0, k, lambda _, y: jnp.tanh(y @ w), x).mean()


def make_step(target_ms: float) -> Step:
    """A jitted step taking about `target_ms` on one core (the matmul count is adjusted
    twice from measurements of the whole step, fixed costs included)."""
    w = jnp.asarray(np.random.default_rng(0).standard_normal((WIDTH, WIDTH), np.float32) / 16)
    x = jnp.ones((BATCH, WIDTH), jnp.float32)
    k = 20
    for _ in range(2):
        k = max(1, round(k * target_ms / median_ms(partial(chain, w, x, k), 10)))
    return lambda batch: chain(w, batch, k)


def consume(step: Step | None, batch: jax.Array) -> float:
    """Run the step on `batch` and wait for its loss (without a step, wait for the batch)."""
    if step is None:
        jax.block_until_ready(batch)
        return 0.0
    return float(step(batch))


# --- Ways to run them ----------------------------------------------------------------------


def median_ms(run: Callable[[], Any], times: int) -> float:
    """The median time of `times` calls of `run`, each waited for (after one to warm up)."""
    jax.block_until_ready(run())  # compile, warm caches
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        jax.block_until_ready(run())
        samples.append(1000 * (time.perf_counter() - started))
    return statistics.median(samples)


def timed_steps(next_batch: Callable[[], jax.Array], step: Step | None, steps: int) -> float:
    """ms per step after 5 warm-up steps (threads started, buffers full)."""
    for _ in range(5):
        consume(step, next_batch())
    started = time.perf_counter()
    for _ in range(steps):
        consume(step, next_batch())
    return 1000 * (time.perf_counter() - started) / steps


def with_for(loader: DataLoader, step: Step | None, steps: int) -> float:
    with iter(loader) as batches:
        return timed_steps(batches.__next__, step, steps)


def with_async_for(loader: DataLoader, step: Step, steps: int) -> float:
    async def run() -> float:
        async with aiter(loader) as batches:
            for _ in range(5):
                await asyncio.to_thread(consume, step, await anext(batches))
            started = time.perf_counter()
            for _ in range(steps):
                await asyncio.to_thread(consume, step, await anext(batches))
            return 1000 * (time.perf_counter() - started) / steps

    return asyncio.run(run())


def with_plain_thread(work: Work, step: Step, steps: int) -> float:
    """The same work without the loader: a thread makes the rows, stacks them, does `work`
    and a device_put per batch, two batches ahead of the step."""
    ready: queue.Queue[jax.Array] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def produce() -> None:
        row, keys = Row(), iter(range(1 << 30))
        while not stop.is_set():
            host = np.stack([row.map(next(keys)) for _ in range(BATCH)])  # what the loader does
            work()
            batch = jax.device_put(host)
            while not stop.is_set():
                try:
                    ready.put(batch, timeout=0.05)
                    break
                except queue.Full:
                    pass

    producer = threading.Thread(target=produce, name="plain-producer")
    producer.start()
    try:
        return timed_steps(ready.get, step, steps)
    finally:
        stop.set()
        producer.join()


# --- The table ---------------------------------------------------------------------------


@dataclass
class Result:
    step_ms: float  # T, measured alone
    loader_ms: float  # L, measured alone
    plain: float
    for0: float
    for2: float
    async2: float
    others: float  # the most cores other processes used during one of the runs


def measure(kind: str, t: float, l_ms: float, steps: int, repeats: int) -> Result:
    wait_for_quiet()  # before calibrating
    step, work = make_step(t), make_work(kind, l_ms)
    on_device = jnp.ones((BATCH, WIDTH), jnp.float32)
    others = [0.0]

    def median_of(run: Callable[[], float]) -> float:
        samples = []
        for _ in range(repeats):
            ms, load = quiet_run(run)
            samples.append(ms)
            others.append(load)
        return statistics.median(samples)

    return Result(
        step_ms=median_of(lambda: median_ms(lambda: consume(step, on_device), steps)),
        loader_ms=median_of(lambda: with_for(make_loader(work, 0), None, steps)),
        plain=median_of(lambda: with_plain_thread(work, step, steps)),
        for0=median_of(lambda: with_for(make_loader(work, 0), step, steps)),
        for2=median_of(lambda: with_for(make_loader(work, 2), step, steps)),
        async2=median_of(lambda: with_async_for(make_loader(work, 2), step, steps)),
        others=max(others),
    )


def quiet_run(run: Callable[[], float], attempts: int = 3, threshold: float = 0.25) -> tuple[float, float]:
    """`run()` and the cores other processes used meanwhile: the first attempt during which
    they used less than `threshold`, else the quietest of `attempts`."""
    tried = []
    for _ in range(attempts):
        wait_for_quiet()
        load = OthersLoad()
        ms = run()
        tried.append((load.cores(), ms))
        if tried[-1][0] < threshold:
            break
    cores, ms = min(tried)
    return ms, cores


def table(kind: str, results: list[Result]) -> str:
    lines = [
        f"Loader work: {kind}\n",
        "| T | L | max(T, L) | T + L | plain thread | `for`, w=0 | `for`, w=2 | `async for`, w=2 | others |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        ideal = max(r.step_ms, r.loader_ms)
        cells = [f"{v:.1f}" for v in (r.step_ms, r.loader_ms, ideal, r.step_ms + r.loader_ms)]
        cells += [f"{v:.1f} ({v / ideal:.2f}x)" for v in (r.plain, r.for0, r.for2, r.async2)]
        lines.append(f"| {' | '.join(cells)} | {r.others:.2f} |")
    return "\n".join(lines)


def banner() -> str:
    build = "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "GIL"
    gil = "on" if getattr(sys, "_is_gil_enabled", lambda: True)() else "off"
    return (
        f"CPython {sys.version.split()[0]} ({build} build, GIL {gil}), JAX {jax.__version__} "
        f"on {jax.default_backend()}, {os.cpu_count()} cores, "
        f"switch interval {1000 * sys.getswitchinterval():g} ms"
    )


def parse_pairs(text: str) -> list[tuple[float, float]]:
    pairs = [tuple(float(v) for v in pair.split(":")) for pair in text.split(",")]
    if any(len(p) != 2 for p in pairs):
        raise SystemExit(f"`--pairs` must look like 10:5,5:10 (T:L in ms), got {text!r}.")
    return [(p[0], p[1]) for p in pairs]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Overlap of the loader with the training step.")
    parser.add_argument("--pairs", default="10:2,10:5,10:10,5:10,2:10", help="T:L pairs, in ms")
    parser.add_argument("--work", default="python,wait", help="kinds of loader work: python, wait")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (the median is shown)")
    parser.add_argument("--patience", type=float, default=15, help="the longest wait for quiet, in s")
    parser.add_argument("--switch-interval", type=float, help="sys.setswitchinterval (s), for the GIL build")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one pair, few steps, once")
    args = parser.parse_args(argv)
    PATIENCE[0] = args.patience
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    pairs = [(5.0, 5.0)] if args.quick else parse_pairs(args.pairs)
    steps, repeats = (10, 1) if args.quick else (args.steps, args.repeats)
    print(f"Overlap of loader and step: {banner()}; median of {repeats} runs of {steps} steps.")
    for kind in args.work.split(","):
        wait_for_quiet()  # before calibrating the Python work
        results = []
        for t, l_ms in pairs:
            results.append(measure(kind, t, l_ms, steps, repeats))
            print(f"  {kind}: T={t:g} L={l_ms:g} done", file=sys.stderr, flush=True)
        print(f"\n{table(kind, results)}")
    print(
        "\nms per step; in brackets, over max(T, L): 1.00x is full overlap, (T + L) / max(T, L) none."
        "\n`others`: the most cores other processes kept busy during one of the runs kept."
    )


if __name__ == "__main__":
    main()
