"""`aioloader.checkpoint`: the iterator's position in orbax checkpoints, alone or next to a model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aioloader as al
from aioloader import Batch, DataLoader, DevicePut, IndexSampler, RangeDataSource
from tests.conftest import ORBAX_MISSING
from tests.grain_reference import grain_python
from tests.support.grain_states import loader
from tests.support.reference import AddOne, Noise, assert_same_outputs, reference_outputs

NUM_RECORDS = 50


ocp = pytest.importorskip("orbax.checkpoint", reason=ORBAX_MISSING)

from aioloader.checkpoint import CheckpointHandler, CheckpointRestore, CheckpointSave  # noqa: E402


def make_loader(workers: int, device_put: DevicePut | None = None, seed: int = 5) -> DataLoader:
    return DataLoader(
        data_source=RangeDataSource(0, NUM_RECORDS),
        sampler=make_sampler(seed),
        operations=[AddOne(), Noise(), Batch(4)],
        worker_count=workers,
        device_put=device_put,
    )


def make_sampler(seed: int = 5) -> IndexSampler:
    return IndexSampler(NUM_RECORDS, shuffle=True, num_epochs=2, seed=seed)


def wanted() -> list[Any]:
    return reference_outputs(range(NUM_RECORDS), make_sampler(), [AddOne(), Noise(), Batch(4)])


def take(iterator: Any, count: int) -> list[Any]:
    return [next(iterator) for _ in range(count)]


@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 3), (1, 1)], ids=["2to0", "0to3", "1to1"])
def test_checkpointer_alone_restores_exactly_the_remaining_batches(
    tmp_path: Path, before: int, after: int
) -> None:
    path = tmp_path / "loader"
    with iter(make_loader(before)) as first:
        head = take(first, 7)
        with ocp.Checkpointer(CheckpointHandler()) as checkpointer:
            checkpointer.save(path, args=CheckpointSave(first))
        saved = first.get_state()
    assert (path / "process_0-of-1.json").read_bytes() == saved
    with iter(make_loader(after)) as second, ocp.Checkpointer(CheckpointHandler()) as checkpointer:
        assert checkpointer.restore(path, args=CheckpointRestore(second)) is second
        tail = list(second)
    assert_same_outputs(head + tail, wanted())


def train_like(manager: Any, iterator: Any, steps: int) -> dict[str, np.ndarray]:
    """Consume `steps` batches, saving model and loader after every second one."""
    params = {"w": np.zeros(4, np.float32)}
    for step in range(1, steps + 1):
        batch = np.asarray(next(iterator))
        params = {"w": params["w"] + batch.sum(axis=0)}
        manager.save(
            step,
            args=ocp.args.Composite(model=ocp.args.StandardSave(params), loader=CheckpointSave(iterator)),
        )
    manager.wait_until_finished()
    return params


def restore_into(manager: Any, iterator: Any) -> Any:
    template = {"w": np.zeros(4, np.float32)}
    return manager.restore(
        manager.latest_step(),
        args=ocp.args.Composite(model=ocp.args.StandardRestore(template), loader=CheckpointRestore(iterator)),
    )


@pytest.mark.parametrize("device_put", [None, DevicePut(buffer_size=3)], ids=["host", "device"])
def test_composite_with_a_checkpoint_manager(tmp_path: Path, device_put: DevicePut | None) -> None:
    options = ocp.CheckpointManagerOptions(save_interval_steps=2, max_to_keep=2)
    with ocp.CheckpointManager(tmp_path / "run", options=options) as manager:
        with iter(make_loader(2, device_put)) as first:
            params = train_like(manager, first, 9)
        assert manager.latest_step() == 8
        assert (tmp_path / "run" / "8" / "loader" / "process_0-of-1.json").exists()
        with iter(make_loader(0, device_put)) as second:
            restored = restore_into(manager, second)
            tail = [np.asarray(b) for b in second]
    batches = wanted()
    assert_same_outputs(tail, [np.asarray(b, np.int32 if device_put else None) for b in batches[8:]])
    np.testing.assert_array_equal(restored.model["w"], params["w"] - batches[8].sum(axis=0))


def test_restore_rewinds_a_running_iterator(tmp_path: Path) -> None:
    with ocp.CheckpointManager(tmp_path / "run") as manager, iter(make_loader(2)) as iterator:
        take(iterator, 3)
        manager.save(3, args=ocp.args.Composite(loader=CheckpointSave(iterator)))
        manager.wait_until_finished()
        take(iterator, 5)
        manager.restore(3, args=ocp.args.Composite(loader=CheckpointRestore(iterator)))
        tail = list(iterator)
    assert_same_outputs(tail, wanted()[3:])


@pytest.mark.asyncio
async def test_async_iterator(tmp_path: Path) -> None:
    with ocp.CheckpointManager(tmp_path / "run") as manager:
        async with aiter(make_loader(2)) as first:
            for _ in range(4):
                await anext(first)
            args = ocp.args.Composite(loader=CheckpointSave(first))
            await asyncio.to_thread(manager.save, 4, args=args)
            await asyncio.to_thread(manager.wait_until_finished)
        async with aiter(make_loader(1)) as second:
            manager.restore(4, args=ocp.args.Composite(loader=CheckpointRestore(second)))
            tail = [b async for b in second]
    assert_same_outputs(tail, wanted()[4:])


def saved_checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "loader"
    with iter(make_loader(0)) as iterator, ocp.Checkpointer(CheckpointHandler()) as checkpointer:
        next(iterator)
        checkpointer.save(path, args=CheckpointSave(iterator))
    return path


def restore(path: Path, loader: DataLoader | None = None) -> None:
    with iter(loader or make_loader(0)) as iterator, ocp.Checkpointer(CheckpointHandler()) as checkpointer:
        checkpointer.restore(path, args=CheckpointRestore(iterator))


def test_a_missing_state_file_is_a_clear_error(tmp_path: Path) -> None:
    path = saved_checkpoint(tmp_path)
    (path / "process_0-of-1.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"process_0-of-1\.json` does not exist.*process 0 of 1"):
        restore(path)


def test_states_of_another_process_count_are_a_clear_error(tmp_path: Path) -> None:
    path = saved_checkpoint(tmp_path)
    state = (path / "process_0-of-1.json").read_text()
    (path / "process_0-of-1.json").unlink()
    for index in (0, 1):
        (path / f"process_{index}-of-2.json").write_text(state)
    with pytest.raises(ValueError, match=r"written by \[2\] JAX processes .* but this run has 1"):
        restore(path)


def test_a_state_file_that_is_not_json_is_a_clear_error(tmp_path: Path) -> None:
    path = saved_checkpoint(tmp_path)
    (path / "process_0-of-1.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"process_0-of-1\.json` is not an aioloader iterator state"):
        restore(path)


def test_the_state_of_another_pipeline_is_rejected(tmp_path: Path) -> None:
    path = saved_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="another sampler"):
        restore(path, make_loader(0, seed=6))


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"`item` must be an iterator of a DataLoader .* got \[1, 2\]"):
        CheckpointSave([1, 2])  # type: ignore[arg-type, unused-ignore]
    with pytest.raises(TypeError, match=r"`item` must be an iterator of a DataLoader"):
        CheckpointRestore(make_loader(0))  # type: ignore[arg-type, unused-ignore]
    with pytest.raises(ValueError, match=r"needs the iterator: pass `args=aioloader\.checkpoint"):
        CheckpointHandler().restore(Path("."))


def test_an_iter_dataset_iterator_is_saved_and_restored_next_to_a_model(tmp_path: Path) -> None:
    import aioloader as al

    def pipeline(workers: int) -> al.IterDataset[Any]:
        parts = {
            name: al.MapDataset.range(base, base + 60).to_iter_dataset()
            for name, base in (("a", 0), ("b", 100))
        }
        return al.IterDataset.mix(parts, {"a": 1, "b": 2}).batch(3).prefetch(workers)

    expected = [batch.tolist() for batch in pipeline(0)]
    model = {"w": np.arange(4.0)}
    with iter(pipeline(2)) as first, ocp.CheckpointManager(tmp_path) as manager:
        head = take(first, 5)
        manager.save(
            5, args=ocp.args.Composite(model=ocp.args.StandardSave(model), loader=CheckpointSave(first))
        )
        manager.wait_until_finished()
    with iter(pipeline(1)) as second, ocp.CheckpointManager(tmp_path) as manager:
        restored = manager.restore(
            5,
            args=ocp.args.Composite(model=ocp.args.StandardRestore(model), loader=CheckpointRestore(second)),
        )
        rest = [batch.tolist() for batch in second]
    np.testing.assert_array_equal(restored["model"]["w"], model["w"])
    assert [batch.tolist() for batch in head] + rest == expected


def test_a_step_that_grains_own_handler_saved_restores_here(tmp_path: Path) -> None:
    """A job moves from Grain to aioloader at a checkpoint: the same file names, the same text."""
    gp = grain_python()
    theirs = iter(loader(gp, "batched", 0))
    head = take(theirs, 6)
    with ocp.Checkpointer(gp.PyGrainCheckpointHandler()) as checkpointer:
        checkpointer.save(tmp_path / "loader", args=gp.PyGrainCheckpointSave(theirs))
    with iter(loader(al, "batched", 2)) as ours, ocp.Checkpointer(CheckpointHandler()) as checkpointer:
        checkpointer.restore(tmp_path / "loader", args=CheckpointRestore(ours))
        assert_same_outputs(head + list(ours), list(loader(al, "batched", 0)))
