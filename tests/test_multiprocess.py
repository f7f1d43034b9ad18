"""Two JAX processes on localhost read disjoint records and iterate the same global batches.

Each process (tests/support/multiprocess_worker.py) has 4 CPU devices; they join one
cluster through `jax.distributed.initialize` with gloo collectives, so a
sharding over all 8 devices spans both processes and `DevicePut` builds the
global arrays with `jax.make_array_from_process_local_data`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jax")

from aioloader import IndexSampler, ShardOptions
from tests.conftest import ORBAX_MISSING
from tests.support.multiprocess_worker import LOCAL_BATCH, NUM_RECORDS, SAVE_AT, SEED

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "support" / "multiprocess_worker.py"
PROCESSES = 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop(worker: subprocess.Popen[bytes]) -> None:
    worker.kill()  # nothing happens to one that has ended
    worker.wait()


def run_cluster(tmp_path: Path) -> list[dict[str, Any]]:
    """Run the worker as processes 0 and 1 of one cluster; return their reports."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # each worker sets 4 devices
    env["PYTHONPATH"] = str(REPO)
    port = free_port()
    logs = [tmp_path / f"log{i}.txt" for i in range(PROCESSES)]
    outs = [tmp_path / f"out{i}.json" for i in range(PROCESSES)]
    with contextlib.ExitStack() as stack:
        workers = [
            subprocess.Popen(
                [sys.executable, str(WORKER), *map(str, (i, PROCESSES, port, outs[i], tmp_path / "ck"))],
                env=env,
                stdout=stack.enter_context(logs[i].open("w")),
                stderr=subprocess.STDOUT,
            )
            for i in range(PROCESSES)
        ]
        for worker in workers:
            stack.callback(stop, worker)
        codes = [worker.wait(timeout=240) for worker in workers]
    assert codes == [0] * PROCESSES, "\n".join(log.read_text()[-3000:] for log in logs)
    return [json.loads(out.read_text()) for out in outs]


def expected_local_batches(index: int) -> list[list[int]]:
    """Process `index`'s batches of keys, from the sampler alone: as Grain's DataLoader reads
    shard `i` of `n`, at global indices `i, i + n, ...` below `len(sampler)`."""
    shard = ShardOptions(index, PROCESSES, drop_remainder=True)
    sampler = IndexSampler(NUM_RECORDS, shard_options=shard, shuffle=True, seed=SEED, num_epochs=1)
    keys = [sampler[i].record_key for i in range(index, len(sampler), PROCESSES)]
    return [keys[s : s + LOCAL_BATCH] for s in range(0, len(keys) - LOCAL_BATCH + 1, LOCAL_BATCH)]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return run_cluster(tmp_path_factory.mktemp("cluster"))


def test_each_process_sees_the_whole_cluster(reports: list[dict[str, Any]]) -> None:
    assert [r["process"] for r in reports] == [[0, 2], [1, 2]]
    assert all(r["devices"] == [4, 8] for r in reports)


def test_processes_read_disjoint_records(reports: list[dict[str, Any]]) -> None:
    seen = [{k for step in r["steps"] for k in step["local_keys"]} for r in reports]
    assert not seen[0] & seen[1]
    for index, report in enumerate(reports):
        assert [step["local_keys"] for step in report["steps"]] == expected_local_batches(index)


def test_every_process_iterates_the_same_global_batches(reports: list[dict[str, Any]]) -> None:
    steps = len(expected_local_batches(0))
    assert [len(r["steps"]) for r in reports] == [steps, steps]
    for step in range(steps):
        parts = [expected_local_batches(i)[step] for i in range(PROCESSES)]
        keys = sum(sum(part) for part in parts)
        for report in reports:
            seen = report["steps"][step]
            assert seen["global_shapes"] == [[LOCAL_BATCH * PROCESSES], [LOCAL_BATCH * PROCESSES, 3]]
            assert seen["totals"] == [keys, 3 * keys]  # a jitted reduction over the global batch


def test_checkpoint_manager_writes_one_state_per_process(reports: list[dict[str, Any]]) -> None:
    if "checkpoint" not in reports[0]:
        pytest.skip(ORBAX_MISSING)
    for report in reports:
        checkpoint = report["checkpoint"]
        assert checkpoint["files"] == ["process_0-of-2.json", "process_1-of-2.json"]
        assert checkpoint["remaining"] == len(expected_local_batches(0)) - SAVE_AT
        assert checkpoint["resumed_equal"]
