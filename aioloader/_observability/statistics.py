"""A loader's figures at one moment: frozen, typed snapshots summed from the threads' meters.

`iterator.statistics()` returns a `LoaderStatistics`: for each stage of the
pipeline (`sampling`, `read`, each operation by its label, `batch`,
`device_put`, and the `consumer`) the items it gave and how long it took;
for each kind of thread (workers, the device thread, the consumer) how long
it worked and waited; the occupancy of each bounded buffer against its
bound; the worker and read-thread counts in use, and whether the consumer's
thread runs the chunks itself (`inline`: faster than the workers here, as the
loader measured while running; see `_executors/pacing`). Figures count from
the moment the iterator's pipeline started (or restarted, after
`set_state`). With `executor="interpreter"`, the steps that a subinterpreter
runs (reads of a small source, per-record operations) are timed there and
counted as their worker's, as with threads; the records' trip between the
worker and its subinterpreter (pickled both ways) is in no stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from aioloader._observability.meter import Meter


@dataclass(frozen=True)
class StageStatistics:
    """One stage: `items` it gave (records, elements or batches) in `busy_seconds` of wall
    time summed over the threads that ran it; `items_per_second` over the loader's life.

    The pipeline's stages count each chunk (or batch job) when its step ends; the
    `consumer` counts outputs delivered, a group of outputs (one chunk's) once all
    of them are; its busy time is the consumer's own, between outputs.
    """

    name: str
    items: int
    items_per_second: float
    busy_seconds: float
    calls: int  # chunks (or batch jobs, or outputs) it ran on


@dataclass(frozen=True)
class ThreadStatistics:
    """The threads of one kind, `name` (`workers`, `device`, `consumer`), summed;
    `count` is how many have started (workers start one another, so at first it may
    be below `LoaderStatistics.worker_count`).

    `busy_seconds` is time spent working (for the consumer: its own code,
    between two outputs); `waiting_for_input_seconds` is time spent waiting
    for something to work on (for the consumer: for the next output);
    `waiting_for_room_seconds` is time spent with work done but the next stage
    full.
    """

    name: str
    count: int
    busy_seconds: float
    waiting_for_input_seconds: float
    waiting_for_room_seconds: float


@dataclass(frozen=True)
class BufferStatistics:
    """A bounded buffer: what it holds now (`in_use`), its bound, and the most it held."""

    name: str
    in_use: int
    capacity: int
    peak: int


@dataclass(frozen=True)
class Observation:
    """What an engine offers for a snapshot (a private hand-over between layers)."""

    names: Sequence[tuple[Hashable, str]]  # step key -> stage name, in pipeline order
    meters: Sequence[Meter]
    buffers: Sequence[BufferStatistics]
    workers: int
    read_threads: int
    inline: bool = False


@dataclass(frozen=True)
class LoaderStatistics:
    """A snapshot of a running loader; see the module docstring. `summary()` says where
    the time goes and what to change."""

    elapsed_seconds: float
    stages: tuple[StageStatistics, ...]
    threads: tuple[ThreadStatistics, ...]
    buffers: tuple[BufferStatistics, ...]
    worker_count: int
    read_threads: int
    inline: bool = False  # the consumer's thread runs the chunks: faster than the workers, as measured

    def stage(self, name: str) -> StageStatistics:
        """The stage called `name` (KeyError naming the stages there are if none is)."""
        return _named(self.stages, name, "stage")

    def thread(self, name: str) -> ThreadStatistics:
        """The threads called `name` (KeyError naming the kinds there are if none is)."""
        return _named(self.threads, name, "threads")

    def buffer(self, name: str) -> BufferStatistics:
        """The buffer called `name` (KeyError naming the buffers there are if none is)."""
        return _named(self.buffers, name, "buffer")

    @property
    def consumer_wait_share(self) -> float:
        """The share of the consumer's time spent waiting for the next output (0 to 1)."""
        consumer = self.thread("consumer")
        total = consumer.busy_seconds + consumer.waiting_for_input_seconds
        return consumer.waiting_for_input_seconds / total if total > 0 else 0.0

    def summary(self) -> str:
        """A few lines: each stage's figures, then the stage that limits throughput and
        what to change (see `aioloader._observability.report`)."""
        from aioloader._observability.report import summary

        return summary(self)

    def to_json(self) -> str:
        """This snapshot as JSON text; `LoaderStatistics.from_json` reads it back, and
        `python -m aioloader.report FILE` prints its summary."""
        import json

        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> LoaderStatistics:
        """The snapshot that `to_json` wrote (ValueError naming what is wrong otherwise)."""
        import json

        try:
            found = json.loads(text)
            loaded = _typed(
                cls,
                {
                    **found,
                    "stages": tuple(_typed(StageStatistics, item) for item in found["stages"]),
                    "threads": tuple(_typed(ThreadStatistics, item) for item in found["threads"]),
                    "buffers": tuple(_typed(BufferStatistics, item) for item in found["buffers"]),
                },
            )
            loaded.thread("consumer")  # every snapshot has one: its summary starts there
            return loaded
        except (ValueError, TypeError, KeyError, RecursionError) as error:
            raise ValueError(f"not the JSON of LoaderStatistics.to_json(): {error!r}") from None


D = TypeVar("D")
_KINDS: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def _typed(cls: type[D], item: Any) -> D:
    """`cls(**item)`, each scalar field of the kind its annotation names (no bool for a number)."""
    if not isinstance(item, dict):
        raise TypeError(f"{cls.__name__} must be a JSON object, got {item!r:.100}")
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        kinds, value = _KINDS.get(str(field.type)), item.get(field.name)
        wrong = kinds is not None and (
            not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool))
        )
        if field.name in item and wrong:
            raise TypeError(f"{cls.__name__}.{field.name} must be {field.type}, got {value!r:.100}")
    return cls(**item)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def _named(found: Sequence[N], name: str, what: str) -> N:
    for item in found:
        if item.name == name:
            return item
    raise KeyError(f"no {what} named {name!r}; there are {[item.name for item in found]}")


def snapshot(
    observation: Observation, consumer: Meter, elapsed: float, waited: float, uncounted: int = 0
) -> LoaderStatistics:
    """Sum the meters of `observation` (and the consumer's, plus `uncounted` outputs
    delivered that it has not counted yet) into a `LoaderStatistics`; `waited` is the
    consumer's time waiting for outputs (the cursor's `waits`)."""
    # Downstream first, as each meter copies its own steps (see `Meter.copy_steps`): the
    # consumer, then the meters from the last made (the device thread's) to the first.
    delivered = consumer.copy_steps().get("consumer", (0, 0.0, 0))
    steps = [meter.copy_steps() for meter in reversed(observation.meters)][::-1]
    stages = _stages(observation.names, steps, elapsed)
    worker_busy = sum(
        seconds
        for meter, found in zip(observation.meters, steps, strict=True)
        if meter.role == "steps"
        for _, seconds, _ in found.values()
    )
    threads = [_threads("workers", [m for m in observation.meters if m.role == "worker"], worker_busy)]
    device = [m for m in observation.meters if m.role == "device"]
    if device:
        threads.append(
            _threads("device", device, sum(s.busy_seconds for s in stages if s.name == "device_put"))
        )
    waited = min(waited, elapsed)
    stages.append(
        StageStatistics(
            "consumer",
            int(delivered[0]) + uncounted,
            _rate(delivered[0] + uncounted, elapsed),
            max(0.0, elapsed - waited),
            int(delivered[2]),
        )
    )
    threads.append(ThreadStatistics("consumer", 1, max(0.0, elapsed - waited), waited, 0.0))
    return LoaderStatistics(
        elapsed,
        tuple(stages),
        tuple(threads),
        tuple(observation.buffers),
        observation.workers,
        observation.read_threads,
        observation.inline,
    )


def _rate(items: float, elapsed: float) -> float:
    return items / elapsed if elapsed > 0 else 0.0


def _stages(
    names: Sequence[tuple[Hashable, str]],
    steps: list[dict[Hashable, tuple[float, float, float]]],
    elapsed: float,
) -> list[StageStatistics]:
    totals: dict[str, list[float]] = {}
    for key, name in names:
        total = totals.setdefault(name, [0, 0.0, 0])
        for found in steps:
            items, seconds, calls = found.get(key, (0, 0.0, 0))
            total[0] += items
            total[1] += seconds
            total[2] += calls
    return [
        StageStatistics(name, int(t[0]), _rate(t[0], elapsed), t[1], int(t[2])) for name, t in totals.items()
    ]


def _threads(role: str, meters: list[Meter], busy: float) -> ThreadStatistics:
    return ThreadStatistics(
        role,
        len(meters),
        busy,
        sum(m.waiting_for_input for m in meters),
        sum(m.waiting_for_room for m in meters),
    )
