"""One JAX process of tests/test_multiprocess.py.

    python tests/support/multiprocess_worker.py ID COUNT PORT OUT DIR

It joins a JAX cluster on 127.0.0.1:PORT with 4 CPU devices and gloo
collectives, iterates a loader sharded by process whose batches become global
arrays over every device of the cluster, and writes to OUT (JSON) what it saw:
the keys of its own part of each batch, the global shapes, and a jitted
reduction over each global batch. With orbax installed it also checkpoints the
iterator into DIR with a CheckpointManager and checks the restore.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aioloader import (
    Batch,
    DataLoader,
    DevicePut,
    IndexSampler,
    MapTransform,
    RangeDataSource,
    ShardByJaxProcess,
)

NUM_RECORDS = 101  # not a multiple of 2: drop_remainder=True makes the shards equal
LOCAL_BATCH = 8  # 4 devices per process: 2 rows each
SEED = 7
SAVE_AT = 2


class ToRecord(MapTransform):
    def map(self, element: Any) -> Any:
        return {"key": np.int32(element), "x": np.full(3, element, np.float32)}


def make_loader(workers: int) -> DataLoader:
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), P("batch"))
    return DataLoader(
        data_source=RangeDataSource(0, NUM_RECORDS),
        sampler=IndexSampler(
            NUM_RECORDS,
            shard_options=ShardByJaxProcess(drop_remainder=True),
            shuffle=True,
            num_epochs=1,
            seed=SEED,
        ),
        operations=[ToRecord(), Batch(LOCAL_BATCH, drop_remainder=True)],
        worker_count=workers,
        device_put=DevicePut(sharding=sharding),
    )


def local_keys(array: jax.Array) -> list[int]:
    """This process's rows of a global array, in order."""
    shards = sorted(array.addressable_shards, key=lambda shard: shard.index[0].start or 0)
    return np.concatenate([np.asarray(shard.data) for shard in shards]).tolist()


@jax.jit
def totals(batch: dict[str, jax.Array]) -> jax.Array:
    return jax.numpy.stack([batch["key"].sum(), batch["x"].sum().astype(jax.numpy.int32)])


def describe(batch: dict[str, jax.Array]) -> dict[str, Any]:
    return {
        "local_keys": local_keys(batch["key"]),
        "global_shapes": [list(batch["key"].shape), list(batch["x"].shape)],
        "totals": np.asarray(totals(batch)).tolist(),
    }


def checkpoint_round_trip(directory: Path) -> dict[str, Any]:
    """Save at step SAVE_AT with a CheckpointManager, restore into a loader with other workers."""
    import orbax.checkpoint as ocp

    from aioloader.checkpoint import CheckpointRestore, CheckpointSave

    with ocp.CheckpointManager(directory) as manager:
        with iter(make_loader(2)) as first:
            for _ in range(SAVE_AT):
                next(first)
            manager.save(SAVE_AT, args=ocp.args.Composite(loader=CheckpointSave(first)))
            manager.wait_until_finished()
            rest = [local_keys(b["key"]) for b in first]
        with iter(make_loader(0)) as second:
            manager.restore(SAVE_AT, args=ocp.args.Composite(loader=CheckpointRestore(second)))
            resumed = [local_keys(b["key"]) for b in second]
    files = sorted(p.name for p in (directory / str(SAVE_AT) / "loader").glob("*.json"))
    return {"files": files, "resumed_equal": rest == resumed, "remaining": len(rest)}


def main(argv: list[str]) -> None:
    process_id, count, port = int(argv[0]), int(argv[1]), int(argv[2])
    out, directory = Path(argv[3]), Path(argv[4])
    jax.config.update("jax_num_cpu_devices", 4)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=count, process_id=process_id)
    report: dict[str, Any] = {
        "process": [jax.process_index(), jax.process_count()],
        "devices": [len(jax.local_devices()), len(jax.devices())],
        "steps": [describe(batch) for batch in make_loader(2)],
    }
    if importlib.util.find_spec("orbax") is not None:
        report["checkpoint"] = checkpoint_round_trip(directory)
    out.write_text(json.dumps(report))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
