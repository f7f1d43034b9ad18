"""`executor="interpreter"`: each worker thread runs the per-record work in its own subinterpreter.

On a GIL build, worker threads take turns on one GIL, so pure-Python
transforms (parsing, tokenising) do not run in parallel. An isolated
subinterpreter has its own GIL: each worker thread makes one, loads into it
once the source and the operations it will run (pickled: module-level
classes and functions travel by reference), and then runs each segment
partly there and partly in the thread itself:

* in its subinterpreter: the user's per-record code that needs no NumPy, i.e.
  the read, when the source pickles (to at most `SOURCE_LIMIT` bytes) and
  loads there, and the maps, filters and flat-maps before `Batch`;
* in the worker thread, on its own copy of the program: the sampler's keys,
  random maps (their generators are NumPy's), batching and every operation
  after it (they see NumPy arrays), and the reads of a source that stays here.
  Async steps are awaited on the event loop, as with threads.

Consecutive steps of one side run in one call, so a chunk of records crosses
once each way per run of subinterpreter steps, as pickled bytes, never record
by record. The steps, their order and the generators are those of
`executor="thread"`, so the output is too; errors travel in the chunk, in
order (see `_interpreter_worker`). A worker's subinterpreter is destroyed when
the worker ends: when the iterator is closed, collected, or the program exits.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

from aioloader._executors.interpreter.subinterpreters import Subinterpreter, SubinterpreterError, unavailable
from aioloader._executors.interpreter.worker import (
    PROTOCOL,
    UNREADABLE,
    escaped,
    failure_of,
    load,
    loads_here,
    pickle_chunk,
    serve,
    serve_each,
    unpack_error,
)
from aioloader._executors.threads import RunnerFactory
from aioloader._operations.transforms import Kind, Op, Operations
from aioloader._program.program import Program, Stage
from aioloader._program.records import RecordChunk
from aioloader._program.steps import Step, StepCall
from aioloader._scheduling.work import SegmentRunner
from aioloader._sources.protocols import is_async_source

# A source that pickles to more than this (an in-memory dataset) is read in the
# worker threads and shared, rather than copied into every subinterpreter.
SOURCE_LIMIT = 1 << 20
_KINDS_THERE = (Kind.MAP, Kind.FILTER, Kind.FLAT_MAP)

Route = list[tuple[bool, tuple[StepCall, ...]]]  # runs of steps, each: in the subinterpreter?


def runs_there(op: Op) -> bool:
    """True for the operations that run in the subinterpreter (see the module docstring)."""
    return op.kind in _KINDS_THERE


def check_interpreter_executor(operations: Operations) -> None:
    """Reject at once what `executor="interpreter"` cannot run, saying why.

    A Python without subinterpreters is a ValueError; an operation for the
    subinterpreters that does not pickle, or that refers to `__main__`
    (which a subinterpreter cannot import), is a TypeError naming it. What
    only shows when a subinterpreter starts (a module that refuses to load
    there) is raised at the first output.
    """
    problem = unavailable()
    if problem is not None:
        raise ValueError(f'`executor="interpreter"` cannot run here: {problem}. Use executor="thread".')
    for position, op in enumerate(operations.before):  # before `Batch`: the user's own positions
        if runs_there(op):
            _check_sendable(position, op.target)


def _check_sendable(position: int, target: Any) -> None:
    try:
        _NoMainUnpickler(io.BytesIO(pickle.dumps(target, PROTOCOL))).load()
    except Exception as error:
        name = getattr(target, "__qualname__", type(target).__qualname__)
        raise TypeError(
            f"`operations[{position}]` ({name}) cannot be sent to a subinterpreter "
            f"({type(error).__name__}: {error}); make it an instance of a module-level class "
            f'or a module-level function of an importable module, or use executor="thread".'
        ) from error


class _NoMainUnpickler(pickle.Unpickler):
    """Refuses what a subinterpreter could not import: its `__main__` is not the script's."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__":
            raise pickle.UnpicklingError(
                f"{name} is defined in __main__, which a subinterpreter cannot import"
            )
        return super().find_class(module, name)


def interpreter_runner(program: Program) -> RunnerFactory:
    """Runners for `executor="interpreter"` workers: each makes its own subinterpreter,
    in its own thread, and destroys it when the worker ends."""
    cargo = _cargo(program)

    @contextlib.contextmanager
    def make() -> Iterator[SegmentRunner]:
        with Subinterpreter() as interpreter:
            program.shutdown.check()  # closed while it started: load nothing, destroy it
            reads_there = _load(interpreter, cargo)
            yield _Runner(program.for_worker(), interpreter, reads_there).run

    return make


def _cargo(program: Program) -> bytes:
    """What every subinterpreter loads: the seed, the source if it may go, the operations that run there."""
    operations = [
        (index, op.label, pickle.dumps(op, PROTOCOL))
        for index, op in enumerate(program.operations.before)
        if runs_there(op)
    ]
    return pickle.dumps((program.seed, _source_cargo(program.source), operations), PROTOCOL)


def _source_cargo(source: Any) -> bytes | None:
    if is_async_source(source):
        return None  # read on the event loop
    try:
        blob = pickle.dumps(source, PROTOCOL)
    except Exception:
        return None  # files, locks: read here
    return blob if len(blob) <= SOURCE_LIMIT else None


def _load(interpreter: Subinterpreter, cargo: bytes) -> bool:
    """Load the cargo into `interpreter`; True if the source is read there."""
    reads_there, problem = pickle.loads(interpreter.call(load, cargo))
    if problem is not None:
        raise SubinterpreterError(problem)
    return bool(reads_there)


class _Runner:
    """Runs a worker's segments, each step in the interpreter where it belongs."""

    def __init__(self, program: Program, interpreter: Subinterpreter, reads_there: bool) -> None:
        self._program, self._interpreter = program, interpreter
        self._routes = {
            (stage, k): _route(segment.steps, program.operations, reads_there)
            for stage, segments in program.segments.items()
            for k, segment in enumerate(segments)
        }

    def run(self, stage: Stage, segment: int, payload: Any) -> Any:
        for there, steps in self._routes[stage, segment]:
            payload = self._run_there(steps, payload) if there else self._program.run_steps(steps, payload)
        return payload

    def _run_there(self, steps: tuple[StepCall, ...], chunk: RecordChunk) -> RecordChunk:
        def request(chunk: RecordChunk) -> object:
            return steps, chunk.start, chunk.keys, chunk.indices, chunk.items, chunk.origins

        sending = "sending records to a subinterpreter"
        sent = pickle_chunk(chunk, request, sending)
        reply = self._call(sent)
        if reply is not None and reply[3] == UNREADABLE:  # a record does not load there: cut before it
            self._fail_at_unreadable(chunk, unpack_error(reply[2]), sending)
            sent = pickle_chunk(chunk, request, sending)
            reply = self._call(sent)
        if reply is None:  # a result does not load here: the steps again, each result apart
            reply = self._each(sent, chunk)
        if reply[3] == UNREADABLE:  # not even the rest loads there: the request itself cannot
            raise unpack_error(reply[2])
        if (error := escaped(reply)) is not None:
            raise error  # as from a worker thread: it stops the pipeline
        chunk.items, chunk.origins, packed, timings = reply
        counter = self._program.meter  # the steps timed there count as this worker's, as with threads
        if counter is not None:
            for call, (items, seconds) in zip(steps, timings, strict=True):
                counter.count(call, items, seconds)
        # A failure there is on an element before any failure here (those
        # elements were cut before sending), so it comes first in order.
        chunk.failure = failure_of(packed) or chunk.failure
        return chunk

    def _call(self, sent: bytes) -> Any:
        """`serve`'s reply to `sent`; None if it does not load in this interpreter."""
        reply = self._interpreter.call(serve, sent)
        try:
            return pickle.loads(reply)
        except Exception:
            return None

    def _each(self, sent: bytes, chunk: RecordChunk) -> Any:
        """`serve`'s reply to `sent`, its elements loaded one by one: cut before the first that
        does not load here, which fails, naming its record, after the ones before it.
        Rare (a result whose class or reducer exists there only), so the steps run again."""
        items, origins, packed, timings = pickle.loads(self._interpreter.call(serve_each, sent))
        if timings is None or timings == UNREADABLE:
            return items, origins, packed, timings
        for j, blob in enumerate(items):
            try:
                items[j] = pickle.loads(blob)
            except Exception as error:
                chunk.items, chunk.origins = items, origins
                chunk.fail(j, error, "receiving results from a subinterpreter")  # it comes first
                return chunk.items, chunk.origins, None, timings
        return items, origins, packed, timings

    def _fail_at_unreadable(self, chunk: RecordChunk, error: BaseException, what: str) -> None:
        """Fail `chunk` at its first record that does not unpickle in the subinterpreter (NumPy
        values, which cannot load there), or at its first if each loads alone (`error`)."""
        for j, item in enumerate(chunk.items):
            answer = pickle.loads(self._interpreter.call(loads_here, pickle.dumps(item, PROTOCOL)))
            if answer is not None:
                chunk.fail(j, unpack_error(answer), what)
                return
        chunk.fail(0, error, what)


def _route(steps: Sequence[StepCall], operations: Operations, reads_there: bool) -> Route:
    def there(call: StepCall) -> bool:
        step, index = call
        if step is Step.READ:
            return reads_there
        return step is Step.BEFORE and runs_there(operations.before[index])

    return [(side, tuple(run)) for side, run in itertools.groupby(steps, key=there)]
