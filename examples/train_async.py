"""The training of train.py with `async for`, sharing its event loop with other tasks.

    python examples/train_async.py            # checkpoints in runs/train_async

Two tasks run next to the training loop: a heartbeat that ticks every 10 ms
and records how late each tick is, and an evaluator that reports the loss on
held-out data every second. They keep running while batches are read,
transformed and moved to the devices, because that work happens on the
loader's worker and device threads; what the training loop itself does that
could block (the jitted step, reading a loss, saving a checkpoint) goes
through `asyncio.to_thread`. The run ends with how late the heartbeats were,
and fails if none ran at all while it trained (the loop was blocked).

Checkpoints and resuming work as in train.py (the model and the loader's
position are saved together; run it again to go on).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from train import (
    Checkpoints,
    Config,
    OnStep,
    Rate,
    State,
    TeacherRegression,
    batch_sharding,
    checkpoints,
    init_state,
    interpreter,
    loss_fn,
    make_loader,
    make_train_step,
    parse,
    report,
    say,
)


@dataclass
class Progress:
    """What the training loop shares with the evaluator."""

    step: int = 0
    state: State = field(default_factory=dict)


class Heartbeat:
    """Ticks every `period` seconds on the event loop, recording how late each tick is."""

    def __init__(self, period: float = 0.01) -> None:
        self.period = period
        self.lateness: list[float] = []

    async def run(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(self.period)
            self.lateness.append(time.perf_counter() - started - self.period)

    def summary(self) -> str:
        late = sorted(self.lateness) or [0.0]
        return (
            f"event loop: {len(self.lateness)} heartbeats of {1000 * self.period:.0f} ms, late by "
            f"{1000 * late[len(late) // 2]:.1f} ms (median), {1000 * late[-1]:.1f} ms (worst)"
        )


async def evaluate_every(seconds: float, progress: Progress, config: Config) -> None:
    """Every `seconds`, the loss of the latest model on held-out data (computed in a thread)."""
    held_out = TeacherRegression(1024, config.features, seed=1)
    batch = jax.device_put({"x": held_out.x, "y": held_out.y}, NamedSharding(batch_sharding().mesh, P()))
    evaluate = jax.jit(loss_fn)
    while True:
        await asyncio.sleep(seconds)
        if progress.state:
            loss = await asyncio.to_thread(lambda: float(evaluate(progress.state["params"], batch)))
            say(f"    evaluator: held-out loss {loss:.4f} at step {progress.step}")


async def train(config: Config, progress: Progress, on_step: OnStep | None = None) -> int:
    """train.py's `train`, with `async for` and every blocking call in a thread; returns
    the number of steps trained."""
    saved, loader, state = await asyncio.gather(
        asyncio.to_thread(checkpoints, config),
        asyncio.to_thread(make_loader, config),
        asyncio.to_thread(init_state, config),
    )
    async with aiter(loader) as batches:
        start, state = await asyncio.to_thread(saved.restore, state, batches)
        end = config.end(start)
        say(f"{'resumed at' if start else 'starting from'} step {start}, training to step {end}")
        if start < end:
            rate = await run_steps(config, (start, end), state, batches, saved, progress, on_step)
            say(rate.summary())
    await asyncio.to_thread(saved.close)  # waits for the last save
    return end - start


async def run_steps(
    config: Config,
    steps: tuple[int, int],
    state: State,
    batches: Any,
    saved: Checkpoints,
    progress: Progress,
    on_step: OnStep | None,
) -> Rate:
    """Train from `steps[0]` to `steps[1]`; `on_step(step, batch, loss)` as in train.py."""
    (start, end), train_step = steps, make_train_step(config.learning_rate)
    step, losses, started, rate = start, [], time.perf_counter(), Rate()
    async for batch in batches:
        step += 1
        state, loss = await asyncio.to_thread(train_step, state, batch)
        progress.step, progress.state = step, state
        if saved.should_save(step) or step == end:
            await asyncio.to_thread(saved.save, step, state, batches)
        losses.append(loss)
        if on_step is not None:
            on_step(step, batch, loss)
        if step % config.log_every == 0 or step in (start + 1, end):
            await asyncio.to_thread(report, step, losses, time.perf_counter() - started)
            losses, started = [], time.perf_counter()
        rate.tick()
        if step == end:
            break
    return rate


async def main(config: Config, on_step: OnStep | None = None) -> None:
    say(f"{interpreter()}: training with `async for` next to a heartbeat and an evaluator")
    heartbeat, progress = Heartbeat(), Progress()
    async with asyncio.TaskGroup() as tasks:
        beating = tasks.create_task(heartbeat.run())
        evaluating = tasks.create_task(evaluate_every(1.0, progress, config))
        trained = await train(config, progress, on_step)
        beating.cancel()
        evaluating.cancel()
    say(heartbeat.summary())
    if trained and not heartbeat.lateness:
        raise SystemExit("error: no heartbeat ran while training: something blocked the event loop")


if __name__ == "__main__":
    asyncio.run(main(parse(defaults=Config(stage=1000, workdir=Path("runs/train_async")))))
