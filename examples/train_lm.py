"""Train a tiny JAX language model on two corpora mixed by weight and packed into rows; resume.

    python examples/train_lm.py --workdir runs/lm --steps 200    # run it again: it resumes

The data pipeline is Grain's Dataset API on aioloader: two text corpora (generated:
"code" and "prose"), each shuffled and repeated as a MapDataset, read in order and
tokenized on the worker threads (`to_iter_dataset().map(Tokenize(...))`), mixed 30/70 by
name (`IterDataset.mix`), packed first-fit into rows of `--seq-len` tokens with
segment ids and positions (`FirstFitPackIterDataset`), batched, and put on the device
ahead of the step. The model is one causal self-attention block over byte tokens that
attends only within its own segment, and learns to predict the next byte.

Every `--checkpoint-every` steps the model and the data iterator are saved together:
with orbax when it is installed (`aioloader.checkpoint.CheckpointSave` next to the
model in one CheckpointManager step), else as NumPy files and the iterator's JSON
state. A new run restores both and sees exactly the rows the old run would have seen
next, whatever `--workers`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import aioloader as al

try:
    import orbax.checkpoint as ocp

    from aioloader.checkpoint import CheckpointRestore, CheckpointSave
except ImportError:  # no orbax on the free-threaded builds: NumPy files instead
    ocp = None

Params = dict[str, jax.Array]
Batch = dict[str, jax.Array]  # "tokens", "tokens_segment_ids", "tokens_positions": (batch, seq_len)
PAD, BOS, EOS, VOCAB = 0, 1, 2, 259  # byte b is token b + 3


@dataclasses.dataclass(frozen=True)
class Config:
    steps: int = 200
    workdir: Path = Path("runs/lm")
    checkpoint_every: int = 50
    log_every: int = 25
    workers: int = 2
    batch_size: int = 8
    seq_len: int = 64
    width: int = 64
    learning_rate: float = 0.5
    weights: tuple[float, float] = (0.3, 0.7)  # code, prose


# --- Data ---------------------------------------------------------------------------------

WORDS = ["the", "a", "loader", "reads", "packs", "mixes", "tokens", "rows", "data", "model", "learns", "from"]


class Prose:
    """Sentences of random words; document `i` is the same in every run."""

    def __len__(self) -> int:
        return 20_000

    def __getitem__(self, i: int) -> str:
        rng = np.random.default_rng(i)
        return " ".join(rng.choice(WORDS, rng.integers(3, 12))) + "."


class Code:
    """Small Python functions."""

    def __len__(self) -> int:
        return 5_000

    def __getitem__(self, i: int) -> str:
        return f"def f{i}(x):\n    return x * {i % 7} + {i % 11}\n"


class Tokenize(al.MapTransform):
    """BOS, the UTF-8 bytes (shifted past the special tokens), EOS; at most `max_length`."""

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length

    def map(self, text: str) -> dict[str, np.ndarray]:
        ids = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int32) + 3
        return {"tokens": np.concatenate([[BOS], ids, [EOS]]).astype(np.int32)[: self.max_length]}


def make_dataset(config: Config) -> al.IterDataset[Any]:
    """Two corpora, tokenized on the workers, mixed by weight, packed, batched, on the device."""

    def corpus(source: Any, seed: int) -> al.IterDataset[dict[str, np.ndarray]]:
        documents = al.MapDataset.source(source).shuffle(seed=seed).repeat()
        return documents.to_iter_dataset().map(Tokenize(config.seq_len))

    mixed = al.IterDataset.mix(
        {"code": corpus(Code(), 1), "prose": corpus(Prose(), 2)},
        {"code": config.weights[0], "prose": config.weights[1]},
    )
    packed = al.FirstFitPackIterDataset(
        mixed, length_struct={"tokens": config.seq_len}, num_packing_bins=4, seed=0
    )
    batches = packed.batch(config.batch_size, drop_remainder=True)
    return batches.prefetch(config.workers).device_put(al.DevicePut(buffer_size=2))


# --- Model: one causal self-attention block that stays within its segment ----------------------


def init_params(config: Config) -> Params:
    keys = jax.random.split(jax.random.key(0), 6)
    d = config.width

    def dense(key: jax.Array, m: int, n: int) -> jax.Array:
        return jax.random.normal(key, (m, n)) / math.sqrt(m)

    return {
        "embed": jax.random.normal(keys[0], (VOCAB, d)) * 0.1,
        "position": jax.random.normal(keys[1], (config.seq_len, d)) * 0.1,
        "qkv": dense(keys[2], d, 3 * d),
        "mlp_in": dense(keys[3], d, 4 * d),
        "mlp_out": dense(keys[4], 4 * d, d),
        "unembed": dense(keys[5], d, VOCAB),
    }


def logits_fn(params: Params, batch: Batch) -> jax.Array:
    tokens, segments = batch["tokens"], batch["tokens_segment_ids"]
    x = params["embed"][tokens] + params["position"][batch["tokens_positions"]]
    q, k, v = jnp.split(x @ params["qkv"], 3, axis=-1)
    length = tokens.shape[1]
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))
    same_segment = segments[:, :, None] == segments[:, None, :]
    scores = jnp.where(causal & same_segment, q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1]), -1e9)
    x = x + jax.nn.softmax(scores, axis=-1) @ v
    x = x + jax.nn.gelu(x @ params["mlp_in"]) @ params["mlp_out"]
    return x @ params["unembed"]


def loss_fn(params: Params, batch: Batch) -> jax.Array:
    """Next-token cross-entropy, only where the next token is in the same segment."""
    logits = logits_fn(params, batch)[:, :-1]
    targets, segments = batch["tokens"][:, 1:], batch["tokens_segment_ids"]
    mask = (segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] > 0)
    losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], axis=-1)[..., 0]
    return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1)


def make_train_step(learning_rate: float) -> Callable[[Params, Batch], tuple[Params, jax.Array]]:
    @jax.jit
    def train_step(params: Params, batch: Batch) -> tuple[Params, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        return jax.tree.map(lambda p, g: p - learning_rate * g, params, grads), loss

    return train_step


# --- Checkpoints: model and data iterator together ---------------------------------------------


class OrbaxCheckpoints:
    """Model and iterator in one orbax CheckpointManager step."""

    def __init__(self, workdir: Path) -> None:
        assert ocp is not None
        self._manager = ocp.CheckpointManager(workdir.absolute() / "checkpoints")

    def save(self, step: int, params: Params, batches: al.DatasetIterator[Any]) -> None:
        args = ocp.args.Composite(model=ocp.args.StandardSave(params), data=CheckpointSave(batches))
        self._manager.save(step, args=args)

    def restore(self, params: Params, batches: al.DatasetIterator[Any]) -> tuple[int, Params]:
        step = self._manager.latest_step()
        if step is None:
            return 0, params
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
        args = ocp.args.Composite(model=ocp.args.StandardRestore(abstract), data=CheckpointRestore(batches))
        return step, self._manager.restore(step, args=args).model

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


class NumpyCheckpoints:
    """Without orbax: `step_N/` holds the model as a `.npz` and the iterator's JSON state,
    written to a temporary directory and renamed, so a half-written step never counts."""

    def __init__(self, workdir: Path) -> None:
        self._root = workdir / "checkpoints"
        self._root.mkdir(parents=True, exist_ok=True)

    def save(self, step: int, params: Params, batches: al.DatasetIterator[Any]) -> None:
        partial = self._root / f"partial_{step}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        np.savez(partial / "model.npz", **{name: np.asarray(value) for name, value in params.items()})
        (partial / "data.json").write_text(json.dumps(batches.get_state()))
        partial.rename(self._root / f"step_{step}")

    def restore(self, params: Params, batches: al.DatasetIterator[Any]) -> tuple[int, Params]:
        steps = [int(p.name.removeprefix("step_")) for p in self._root.glob("step_*")]
        if not steps:
            return 0, params
        folder = self._root / f"step_{max(steps)}"
        batches.set_state(json.loads((folder / "data.json").read_text()))
        with np.load(folder / "model.npz") as saved:
            return max(steps), {name: jnp.asarray(saved[name]) for name in params}

    def close(self) -> None:
        pass


# --- The loop ----------------------------------------------------------------------------------

OnStep = Callable[[int, Batch, jax.Array], None]


def train(config: Config, on_step: OnStep | None = None) -> Params:
    """Train to `config.steps`, resuming from the latest checkpoint in `config.workdir`.

    `on_step(step, batch, loss)` is called after every step (for tests and tools).
    """
    checkpoints = OrbaxCheckpoints(config.workdir) if ocp is not None else NumpyCheckpoints(config.workdir)
    train_step = make_train_step(config.learning_rate)
    with iter(make_dataset(config)) as batches:
        start, params = checkpoints.restore(init_params(config), batches)
        print(f"{'resumed at' if start else 'starting from'} step {start}, training to step {config.steps}")
        started = time.perf_counter()
        for step in range(start + 1, config.steps + 1):
            batch = next(batches)  # the corpora repeat forever: the step count decides the end
            params, loss = train_step(params, batch)
            if step % config.checkpoint_every == 0 or step == config.steps:
                checkpoints.save(step, params, batches)
            if on_step is not None:
                on_step(step, batch, loss)
            if step % config.log_every == 0 or step == config.steps:
                rate = (time.perf_counter() - started) / (step - start)
                print(f"step {step:5d}  loss {float(loss):.4f}  ({1000 * rate:.1f} ms/step)")
    checkpoints.close()
    return params


def fingerprint(batch: Batch) -> str:
    """A short hash of a batch's arrays: equal batches, equal fingerprints."""
    digest = hashlib.sha256()
    for name in sorted(batch):
        digest.update(np.asarray(batch[name]).tobytes())
    return digest.hexdigest()[:16]


def parse(argv: Sequence[str] | None = None, defaults: Config = Config()) -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=defaults.steps, help="the step to reach")
    parser.add_argument("--workdir", type=Path, default=defaults.workdir, help="checkpoints go here")
    parser.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every)
    parser.add_argument("--log-every", type=int, default=defaults.log_every)
    parser.add_argument("--workers", type=int, default=defaults.workers, help="loader threads per corpus")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len, help="tokens per packed row")
    args = parser.parse_args(argv)
    return dataclasses.replace(defaults, **vars(args))  # the flags are named as the fields


def main(argv: Sequence[str] | None = None) -> None:
    config = parse(argv)
    saver = "orbax" if ocp is not None else "NumPy files (orbax is not installed)"
    devices = f"{jax.device_count()} {jax.default_backend()} device(s)"
    print(f"{devices}; checkpoints with {saver} in {config.workdir}")
    train(config)


if __name__ == "__main__":
    main()
