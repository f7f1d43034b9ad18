"""Checkpoint a loader's iterator with orbax-checkpoint, next to the model's state.

    import orbax.checkpoint as ocp
    import aioloader.checkpoint

    manager.save(step, args=ocp.args.Composite(
        model=ocp.args.StandardSave(params),
        loader=aioloader.checkpoint.CheckpointSave(iterator)))
    ...
    restored = manager.restore(step, args=ocp.args.Composite(
        model=ocp.args.StandardRestore(abstract_params),
        loader=aioloader.checkpoint.CheckpointRestore(iterator)))

Each JAX process writes its own iterator's state to `process_{i}-of-{n}.json`
in the item's directory and restores from it; the iterator then continues
with exactly the outputs it would have produced next. `CheckpointHandler`
also works alone, as `ocp.Checkpointer(CheckpointHandler())`.

Needs orbax-checkpoint: `pip install 'aioloader[orbax]'`. `import aioloader`
never imports it; importing this module does, and fails with that advice when
it is missing.
"""

from aioloader._iteration.orbax import CheckpointHandler, CheckpointRestore, CheckpointSave

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"]
