"""Train an MLP in plain JAX, fed by aioloader, checkpointed with orbax; run it again and it resumes.

    ./dev train          # free-threaded CPython, GIL off: PYTHON_GIL=0 python examples/train.py
    ./dev train --gil    # the GIL build (CPython 3.11)

The data is generated: a regression problem whose targets come from a fixed
random "teacher" network, held in memory and read record by record. The
loader shuffles it (a new order every epoch), batches it and adds noise to
the targets on two worker threads, and puts each batch on the devices,
sharded along the batch axis, two batches ahead of the training step.

Every `--checkpoint-every` steps an orbax CheckpointManager saves the model
and the loader's position together. Where orbax-checkpoint does not install
(free-threaded 3.13: it needs tensorstore, which has no wheels there; 3.14t
has them), the parameters are saved with numpy beside the loader's state
instead, in `checkpoints-numpy/`, and the run says so. A new run restores both from the latest
checkpoint and goes on with exactly the batches the old run would have seen
next, so a job that is killed and started again trains as if it never
stopped. Each run trains to the end of the next stage of 2000 steps (the
first to step 2000, the next to 4000, ...), so a run killed mid-stage and
started again finishes the same stage; `--steps N` trains to step N instead.

On several hosts, call `jax.distributed.initialize()` first: each process then
reads its own shard of the records (`ShardByJaxProcess`), its batches become
parts of global arrays over every device, and each writes its own loader
state into the same checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import aioloader as al

try:
    import orbax.checkpoint as ocp

    from aioloader.checkpoint import CheckpointRestore, CheckpointSave
except ImportError:  # free-threaded 3.13: orbax needs tensorstore, which has no wheels there
    ocp = None

State = dict[str, Any]  # {"params": ..., "momentum": ...}, pytrees of jax.Arrays
Batch = dict[str, jax.Array]  # {"x": (batch, features), "y": (batch,)}


@dataclasses.dataclass(frozen=True)
class Config:
    steps: int | None = None  # the step to reach; None: the end of the next stage
    stage: int = 2000
    workdir: Path = Path("runs/train")
    batch_size: int = 128  # global: split between JAX processes, then between devices
    checkpoint_every: int = 200
    log_every: int = 200
    workers: int = 2
    executor: str = "thread"  # or "interpreter" (subinterpreters, where the Python has them)
    num_records: int = 50_000
    features: int = 32
    hidden: int = 256
    learning_rate: float = 0.02

    def end(self, start: int) -> int:
        """The step to train to from `start`: `steps`, or the end of the stage after `start`."""
        return self.steps if self.steps is not None else (start // self.stage + 1) * self.stage


# --- Data -----------------------------------------------------------------------------


class TeacherRegression:
    """`num_records` examples `{"x": float32[features], "y": float32}`: y is a fixed random
    network of x. A random-access data source: `len()` and `[key]`."""

    def __init__(self, num_records: int, features: int, seed: int = 0) -> None:
        teacher = np.random.default_rng(1234)  # the same teacher whatever the seed of the data
        w1 = teacher.standard_normal((features, 64)) / math.sqrt(features)
        w2 = teacher.standard_normal(64) / math.sqrt(64)
        self.x = np.random.default_rng(seed).standard_normal((num_records, features), dtype=np.float32)
        self.y = (np.tanh(self.x @ w1) @ w2).astype(np.float32)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, key: int) -> dict[str, np.ndarray]:
        return {"x": self.x[key], "y": self.y[key]}

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, np.ndarray]]:
        """A chunk's records in one read (aioloader and Grain use it when a source has it).

        Rows of arrays this thread owns: on free-threaded CPython each view of the shared
        `self.x` would bump its reference count from every worker at once, and two workers
        made no more batches than one, at 1.7 times the CPU."""
        x, y = self.x[keys], self.y[keys]
        return [{"x": x[j], "y": y[j]} for j in range(len(keys))]


class NoisyTargets(al.RandomMapTransform):
    """Adds Gaussian noise to the targets of a batch, drawn from the batch's own generator:
    the same batch gets the same noise in every run, resumed or not.

    It runs on whole batches (after `Batch`) because making a generator costs
    about 20 us: one per batch is cheap, one per record would cost more than
    the rest of the pipeline.
    """

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def random_map(self, batch: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
        noise = self.scale * rng.standard_normal(batch["y"].shape, dtype=np.float32)
        return {"x": batch["x"], "y": batch["y"] + noise}


def batch_sharding() -> NamedSharding:
    """Batches split along their first axis over every device of every process."""
    return NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), P("batch"))


def make_loader(config: Config) -> al.DataLoader:
    source = TeacherRegression(config.num_records, config.features)
    return al.DataLoader(
        data_source=source,
        sampler=al.IndexSampler(
            len(source),
            shard_options=al.ShardByJaxProcess(drop_remainder=True),
            shuffle=True,
            num_epochs=None,  # repeat forever
            seed=0,
        ),
        operations=[
            al.Batch(config.batch_size // jax.process_count(), drop_remainder=True),
            NoisyTargets(0.05),
        ],
        worker_count=config.workers,
        executor=config.executor,
        device_put=al.DevicePut(sharding=batch_sharding(), buffer_size=2),
    )


# --- Model: an MLP and SGD with momentum, in plain JAX ------------------------------------


def init_state(config: Config) -> State:
    """Fresh parameters (the same in every run and process), replicated on every device."""
    sizes = [config.features, config.hidden, config.hidden, 1]
    keys = jax.random.split(jax.random.key(0), len(sizes) - 1)
    params = [
        {"w": jax.random.normal(key, (m, n)) / math.sqrt(m), "b": jnp.zeros(n)}
        for key, m, n in zip(keys, sizes, sizes[1:], strict=False)
    ]
    state = {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}
    return jax.device_put(state, NamedSharding(batch_sharding().mesh, P()))


def predict(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return (x @ params[-1]["w"] + params[-1]["b"])[:, 0]


def loss_fn(params: list[dict[str, jax.Array]], batch: Batch) -> jax.Array:
    return jnp.mean((predict(params, batch["x"]) - batch["y"]) ** 2)


TrainStep = Callable[[State, Batch], tuple[State, jax.Array]]


def make_train_step(learning_rate: float) -> TrainStep:
    @jax.jit
    def train_step(state: State, batch: Batch) -> tuple[State, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch)
        momentum = jax.tree.map(lambda m, g: 0.9 * m + g, state["momentum"], grads)
        params = jax.tree.map(lambda p, m: p - learning_rate * m, state["params"], momentum)
        return {"params": params, "momentum": momentum}, loss

    return train_step


# --- Checkpoints: model and loader together --------------------------------------------


class Saving:
    """What both kinds of checkpoints share: a context that waits for the last save."""

    def close(self) -> None:
        pass

    def __enter__(self) -> Saving:
        return self

    def __exit__(self, *error: object) -> None:
        self.close()


class OrbaxCheckpoints(Saving):
    """The model and the loader's position in one orbax checkpoint per saved step (written in
    the background); the last 3 are kept."""

    def __init__(self, config: Config) -> None:
        options = ocp.CheckpointManagerOptions(save_interval_steps=config.checkpoint_every, max_to_keep=3)
        self.manager = ocp.CheckpointManager(config.workdir.absolute() / "checkpoints", options=options)

    def should_save(self, step: int) -> bool:
        return bool(self.manager.should_save(step))

    def save(self, step: int, state: State, batches: Any) -> None:
        """Save the model at `step`, and where the loader is."""
        args = ocp.args.Composite(model=ocp.args.StandardSave(state), loader=CheckpointSave(batches))
        self.manager.save(step, args=args, force=True)

    def restore(self, state: State, batches: Any) -> tuple[int, State]:
        """The latest step and model, with `batches` moved to where that step left the loader;
        step 0 and `state` unchanged when there is no checkpoint yet."""
        step = self.manager.latest_step()
        if step is None:
            return 0, state
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)  # shapes, dtypes and shardings
        args = ocp.args.Composite(model=ocp.args.StandardRestore(abstract), loader=CheckpointRestore(batches))
        return step, self.manager.restore(step, args=args).model

    def close(self) -> None:
        """Wait for the last save to be written."""
        self.manager.wait_until_finished()
        self.manager.close()


class NumpyCheckpoints(Saving):
    """Where orbax does not install: per saved step, a folder with the parameters in
    `model.npz` and the loader's state in `loader.json`, written whole and then renamed (a
    killed run leaves no half checkpoint); the last 3 are kept. One JAX process only."""

    def __init__(self, config: Config) -> None:
        if jax.process_count() > 1:
            raise RuntimeError("numpy checkpoints are for one process: install orbax-checkpoint")
        self.directory = config.workdir.absolute() / "checkpoints-numpy"
        self.every = config.checkpoint_every

    def should_save(self, step: int) -> bool:
        return step % self.every == 0

    def save(self, step: int, state: State, batches: Any) -> None:
        partial = self.directory / f"{step}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        np.savez(partial / "model.npz", *[np.asarray(leaf) for leaf in jax.tree.leaves(state)])
        (partial / "loader.json").write_bytes(batches.get_state())
        shutil.rmtree(self.directory / str(step), ignore_errors=True)
        partial.rename(self.directory / str(step))
        for old in self.steps()[:-3]:
            shutil.rmtree(self.directory / str(old))

    def steps(self) -> list[int]:
        return sorted(int(p.name) for p in self.directory.glob("*") if p.name.isdigit())

    def restore(self, state: State, batches: Any) -> tuple[int, State]:
        """As `OrbaxCheckpoints.restore`: each array goes back with its saved shape and dtype
        onto the sharding of the array it replaces."""
        if not self.steps():
            return 0, state
        folder = self.directory / str(self.steps()[-1])
        leaves, tree = jax.tree.flatten(state)
        with np.load(folder / "model.npz") as saved:
            arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        if [(a.shape, a.dtype) for a in arrays] != [(x.shape, x.dtype) for x in leaves]:
            raise ValueError(f"`{folder / 'model.npz'}` holds parameters of another model.")
        batches.set_state((folder / "loader.json").read_bytes())
        restored = [jax.device_put(a, x.sharding) for a, x in zip(arrays, leaves, strict=True)]
        return self.steps()[-1], jax.tree.unflatten(tree, restored)


Checkpoints = OrbaxCheckpoints | NumpyCheckpoints


def checkpoints(config: Config) -> Checkpoints:
    """orbax where it installs; else numpy, saying so in one line."""
    if ocp is not None:
        return OrbaxCheckpoints(config)
    say(
        "checkpoints: orbax-checkpoint is not installed here (it needs tensorstore, which has no "
        "free-threaded 3.13 wheels): saving the parameters with numpy beside the loader's state"
    )
    return NumpyCheckpoints(config)


# --- The loop -----------------------------------------------------------------------------

OnStep = Callable[[int, Batch, jax.Array], None]


def train(config: Config, on_step: OnStep | None = None) -> State:
    """Train to `config.end(start)`, resuming at `start`, the latest checkpoint in `config.workdir`.

    `on_step(step, batch, loss)` is called after every step (for tests and tools). The
    progress shows the share of the loop's time spent waiting for the loader; at the
    end, the last steps run again on the same batches held in memory, with the loader
    stopped, and their step times are compared.
    """
    train_step = make_train_step(config.learning_rate)
    with checkpoints(config) as saved, iter(make_loader(config)) as batches:
        start, state = saved.restore(init_state(config), batches)
        end = config.end(start)
        say(f"{'resumed at' if start else 'starting from'} step {start}, training to step {end}")
        losses, started, rate = [], time.perf_counter(), Rate()
        progress, timed = Progress(start, end, config.batch_size), TimedSteps(end)
        for step in range(start + 1, end + 1):
            batch = next(batches)  # the sampler repeats forever: the step count decides the end
            state, loss = timed.run(step, train_step, state, batch)
            if saved.should_save(step) or step == end:
                saved.save(step, state, batches)
            losses.append(loss)
            if on_step is not None:
                on_step(step, batch, loss)
            if step % config.log_every == 0 or step in (start + 1, end):
                report(step, losses, time.perf_counter() - started)
                losses, started = [], time.perf_counter()
            rate.tick()
            progress.update(step, batches)
        progress.close(batches)
    say(rate.summary())
    say(timed.compare(train_step, state))
    return state


class Progress:
    """Steps, records/s and the loader's wait share: a tqdm bar on a terminal (with the
    `progress` extra), otherwise a plain line every few seconds and at the end."""

    def __init__(self, start: int, end: int, batch_size: int, every: float = 5.0) -> None:
        self.start, self.batch_size, self.every = start, batch_size, every
        self.started = self.printed = time.perf_counter()
        self.bar: Any = None
        if sys.stdout.isatty() and jax.process_index() == 0:
            with contextlib.suppress(ImportError):
                from tqdm import tqdm

                self.bar = tqdm(total=end - start, unit="batch", dynamic_ncols=True)

    def line(self, step: int, batches: Any) -> str:
        """`batches` is the loader's iterator: its statistics give the wait share."""
        done, seconds = step - self.start, time.perf_counter() - self.started
        records = done * self.batch_size / seconds if seconds > 0 else 0.0
        wait = batches.statistics().consumer_wait_share
        return f"{done} batches, {records:,.0f} records/s, loader wait {wait:.0%} of the loop"

    def update(self, step: int, batches: Any) -> None:
        if self.bar is not None:
            self.bar.update(1)
            if time.perf_counter() - self.printed >= 0.5:
                self.printed = time.perf_counter()
                self.bar.set_postfix_str(self.line(step, batches), refresh=False)
        elif time.perf_counter() - self.printed >= self.every:
            self.printed = time.perf_counter()
            say(f"progress: step {step}, {self.line(step, batches)}")
        self.last = step

    def close(self, batches: Any) -> None:
        if self.bar is not None:
            self.bar.close()
        if getattr(self, "last", None) is not None:
            say(f"progress: step {self.last}, {self.line(self.last, batches)}")
            say(f"loader: {batches.statistics().summary().splitlines()[-1]}")


class TimedSteps:
    """The last `keep` steps, timed to the end of their computation, and their batches: run
    again after the loader has stopped, they show whether its threads slow the step down
    (on free-threaded CPython they compete with the training thread for the cores)."""

    def __init__(self, end: int, keep: int = 20) -> None:
        self.first = end - keep + 1
        self.seconds: list[float] = []
        self.batches: list[Batch] = []

    def run(self, step: int, train_step: TrainStep, state: State, batch: Batch) -> tuple[State, jax.Array]:
        """`train_step(state, batch)`; timed, and the batch kept, for the last steps."""
        if step < self.first:
            return train_step(state, batch)
        jax.block_until_ready(batch)
        started = time.perf_counter()
        state, loss = jax.block_until_ready(train_step(state, batch))
        self.seconds.append(time.perf_counter() - started)
        self.batches.append(batch)
        return state, loss

    def compare(self, train_step: TrainStep, state: State) -> str:
        if len(self.seconds) < 2:
            return "step time: too few steps to compare"
        again = []
        for batch in self.batches:
            started = time.perf_counter()
            state, loss = train_step(state, batch)
            jax.block_until_ready((state, loss))
            again.append(time.perf_counter() - started)
        running, held = float(np.median(self.seconds)), float(np.median(again))
        return (
            f"step time: {1000 * running:.2f} ms with the loader running, {1000 * held:.2f} ms on the "
            f"same {len(again)} batches held in memory (ratio {running / held:.2f})"
        )


def report(step: int, losses: list[jax.Array], seconds: float) -> None:
    """The mean loss since the last report, and the time per step (not for a lone first
    step, which includes compiling)."""
    rate = f"  ({1000 * seconds / len(losses):.1f} ms/step)" if len(losses) > 1 else ""
    say(f"step {step:6d}  loss {np.mean(jax.device_get(losses)):.4f}{rate}")


class Rate:
    """Steps per second over a run, from the end of its first step (which compiles)."""

    def __init__(self) -> None:
        self.steps, self.since = -1, 0.0

    def tick(self) -> None:
        self.steps += 1
        if self.steps == 0:
            self.since = time.perf_counter()

    def summary(self) -> str:
        if self.steps < 1:
            return "trained no more than one step: no rate to report"
        seconds = time.perf_counter() - self.since
        return f"{self.steps / seconds:.1f} steps/s over {self.steps} steps, on {interpreter()}"


def interpreter() -> str:
    """Which CPython runs this, and whether the GIL is on."""
    build = "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "GIL build"
    gil = "GIL on" if getattr(sys, "_is_gil_enabled", lambda: True)() else "GIL off"
    return f"CPython {sys.version.split()[0]} ({build}, {gil})"


def say(message: str) -> None:
    """Print on the first process only."""
    if jax.process_index() == 0:
        print(message, flush=True)


def parse(argv: Sequence[str] | None = None, defaults: Config = Config()) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    stage = f"the end of the next stage of {defaults.stage} steps"
    parser.add_argument("--steps", type=int, default=defaults.steps, help=f"the step to reach ({stage})")
    parser.add_argument("--workdir", type=Path, default=defaults.workdir, help="checkpoints go here")
    parser.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every)
    parser.add_argument("--log-every", type=int, default=defaults.log_every)
    parser.add_argument("--workers", type=int, default=defaults.workers, help="loader threads")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="global batch size")
    args = parser.parse_args(argv)
    return dataclasses.replace(defaults, **vars(args))  # the flags are named as the fields


def main(argv: Sequence[str] | None = None) -> None:
    config = parse(argv)
    say(
        f"{interpreter()}; {jax.device_count()} {jax.default_backend()} device(s), "
        f"{jax.process_count()} process(es), global batch {config.batch_size}, in {config.workdir}"
    )
    train(config)


if __name__ == "__main__":
    main()
