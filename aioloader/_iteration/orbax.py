"""The orbax-checkpoint handler behind `aioloader.checkpoint`.

An iterator's state is a few hundred bytes of JSON (see `state`), different on
each JAX process because each reads its own shard. The handler therefore
writes one file per process, `process_{i}-of-{n}.json`, into the item's
directory, and each process restores from its own file. Those are the
names and the text Grain's `PyGrainCheckpointHandler` writes, so a step that
Grain's handler saved restores here too (and files written before states
were bytes hold the JSON of the dict that `get_state()` returned then). orbax gives the
atomicity: the item directory is a temporary one until every process has
written, then the whole step is committed at once.

Importing this module imports orbax and registers the handler with it, so
that `CheckpointSave` / `CheckpointRestore` work inside `ocp.args.Composite`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from aioloader._iteration.iterators import AsyncDataLoaderIterator, DataLoaderIterator
from aioloader._iteration.state import CheckpointableIterator

try:
    import jax
    import orbax.checkpoint as ocp
except ImportError as error:
    raise ImportError(
        "aioloader.checkpoint needs orbax-checkpoint, which is not installed here "
        f"({error}); install the `orbax` extra: pip install 'aioloader[orbax]'."
    ) from error

LoaderIterator = DataLoaderIterator | AsyncDataLoaderIterator | CheckpointableIterator
_FILE_NAME = re.compile(r"process_(\d+)-of-(\d+)\.json")


def state_file_name(process_index: int, process_count: int) -> str:
    """The name of the file that holds process `process_index`'s state."""
    return f"process_{process_index}-of-{process_count}.json"


class CheckpointHandler(ocp.CheckpointHandler):  # type: ignore[misc]
    """Saves and restores the position of an aioloader iterator, one JSON file per JAX process.

    `save` writes the iterator's `get_state()`, taken when `save` is called,
    to `process_{i}-of-{n}.json` (i = `jax.process_index()`, n =
    `jax.process_count()`) in the item's directory. `restore` reads this
    process's file and calls `set_state`: the iterator then yields exactly the
    outputs it would have yielded next, whatever its `worker_count`. A missing
    file, or files written by another number of processes, is a clear error.
    """

    def save(self, directory: Any, args: CheckpointSave) -> None:
        """Write this process's state file into `directory` (an `etils.epath.Path`)."""
        state = args.item.get_state()  # a DataLoader's: JSON bytes; an IterDataset's: a dict, as in Grain
        data = state if isinstance(state, bytes) else json.dumps(state, separators=(",", ":")).encode()
        (directory / state_file_name(jax.process_index(), jax.process_count())).write_bytes(data)

    def restore(self, directory: Any, args: CheckpointRestore | None = None) -> LoaderIterator:
        """Set `args.item` to the state saved by this process; return it."""
        if args is None:
            raise ValueError(
                "Restoring an aioloader iterator needs the iterator: pass "
                "`args=aioloader.checkpoint.CheckpointRestore(iterator)`."
            )
        state = _read_state(directory)
        if isinstance(args.item, CheckpointableIterator):
            args.item.set_state(json.loads(state))
        else:
            args.item.set_state(state)
        return args.item

    @classmethod
    def typestr(cls) -> str:
        """The name orbax records in a checkpoint's metadata: stable across internal moves."""
        return "aioloader.checkpoint.CheckpointHandler"


@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):  # type: ignore[misc]
    """Save `item`'s position: `ocp.args.Composite(loader=CheckpointSave(iterator), ...)`."""

    item: LoaderIterator

    def __post_init__(self) -> None:
        _check_iterator(self.item)


@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):  # type: ignore[misc]
    """Restore `item` (a fresh or running iterator of the same pipeline) to the saved position."""

    item: LoaderIterator

    def __post_init__(self) -> None:
        _check_iterator(self.item)


ocp.args.register_with_handler(CheckpointHandler, for_save=True)(CheckpointSave)
ocp.args.register_with_handler(CheckpointHandler, for_restore=True)(CheckpointRestore)


def _check_iterator(item: Any) -> None:
    if isinstance(item, DataLoaderIterator | AsyncDataLoaderIterator | CheckpointableIterator):
        return
    raise TypeError(
        "`item` must be an iterator of a DataLoader (`iter(loader)` or `aiter(loader)`) or of an "
        f"IterDataset (`iter(dataset)`), got {item!r:.200} of type {type(item).__name__}."
    )


def _read_state(directory: Any) -> bytes:
    """This process's state from `directory`; a clear error when it is not there or not JSON."""
    index, count = jax.process_index(), jax.process_count()
    path = directory / state_file_name(index, count)
    if not path.exists():
        _raise_missing(directory, index, count)
    state: bytes = path.read_bytes()
    try:
        json.loads(state)
    except ValueError as error:
        raise ValueError(f"`{path}` is not an aioloader iterator state: {error}.") from error
    return state


def _raise_missing(directory: Any, index: int, count: int) -> None:
    names = sorted(p.name for p in directory.glob("process_*-of-*.json"))
    counts = {int(m.group(2)) for name in names if (m := _FILE_NAME.fullmatch(name))}
    if counts and count not in counts:
        raise ValueError(
            f"The iterator states in `{directory}` were written by {sorted(counts)} JAX processes "
            f"({', '.join(names)}), but this run has {count}; restore with the same number of processes."
        )
    raise FileNotFoundError(
        f"`{directory / state_file_name(index, count)}` does not exist: the checkpoint holds no "
        f"iterator state for process {index} of {count}."
    )


# Grain's names in `grain.python`, so that a script written for Grain keeps them.
PyGrainCheckpointHandler = CheckpointHandler
PyGrainCheckpointSave = CheckpointSave
PyGrainCheckpointRestore = CheckpointRestore
