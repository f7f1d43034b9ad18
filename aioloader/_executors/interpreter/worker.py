"""The subinterpreter's side of `executor="interpreter"`, and what crosses to it and back.

Each subinterpreter imports this module once, and so has its own instance of
it: `load` keeps the source and the operations the main interpreter sent,
and every `serve` uses them, as a worker thread uses its own copy of the
program. Both take and return pickled bytes.

* request: `(steps, start, keys, indices, items, origins)`, the steps to run
  (`Step.READ`, `Step.BEFORE`, see `_STEPS`) on a chunk of records: its
  first position, its keys and global indices, and the elements so far with
  the record each came from;
* reply: `(items, origins, error)`, what the steps made of them, and the
  first failure, if any, packed by `pack_error`.

A failure is carried as the exception pickled where it can be, and its type
name, message, notes and traceback as text in any case: it arrives with its
type name, its message and the record's index and key even when it cannot be
rebuilt. An element that does not pickle fails its record in order, like an
exception in a transform.
"""

from __future__ import annotations

import importlib
import pickle
import time
import traceback
from collections.abc import Callable
from typing import Any

from aioloader._common.failures import Failure
from aioloader._executors.interpreter.subinterpreters import RemoteTraceback, SubinterpreterError
from aioloader._operations.apply import apply
from aioloader._operations.transforms import Op
from aioloader._program.records import RecordChunk, read
from aioloader._program.steps import Step

PROTOCOL = pickle.HIGHEST_PROTOCOL
UNREADABLE = "unreadable"  # `serve`'s reply in place of the timings: the request did not unpickle there
# An error from a subinterpreter: pickled, its shape (see `_shape`), its description, notes
# and traceback as text.
PackedError = tuple[bytes | None, bytes | None, str, list[str], str]

# This interpreter's own source and operations (by their index in `before`), set by `load`.
_source: Any = None
_operations: dict[int, Op] = {}
_seed: int | None = None


def load(cargo: bytes) -> bytes:
    """Keep the program's parts that run here; reply `(source_loaded, problem)`.

    A source that cannot be loaded here is read in the worker thread
    instead; an operation that cannot is a `problem`: a sentence naming it.
    """
    global _source, _seed
    _seed, source, operations = pickle.loads(cargo)
    _source = _loaded(source)
    for index, label, blob in operations:
        try:
            _operations[index] = pickle.loads(blob)
        except Exception as error:
            return pickle.dumps((False, _cannot_load(label, error)), PROTOCOL)
    return pickle.dumps((_source is not None, None), PROTOCOL)


def _loaded(source: bytes | None) -> Any:
    try:
        return None if source is None else pickle.loads(source)
    except Exception:
        return None


def _cannot_load(label: str, error: Exception) -> str:
    advice = 'run it with executor="thread"'
    if isinstance(error, ImportError):
        advice = f"its modules must load in an isolated subinterpreter; if they cannot, {advice}"
    return f"{label} cannot be loaded in a subinterpreter ({type(error).__name__}: {error}): {advice}."


def serve(request: bytes) -> bytes:
    """Run the requested steps on one chunk of records; reply with what they made, and
    each step's (items out, seconds), for the worker's statistics."""
    return _serve(request, each=False)


def serve_each(request: bytes) -> bytes:
    """`serve`, with each element of the reply pickled on its own: for a reply that did not
    load in the main interpreter, whose first element that does not the sender then finds."""
    return _serve(request, each=True)


def _serve(request: bytes, each: bool) -> bytes:
    try:
        steps, start, keys, indices, items, origins = pickle.loads(request)
    except Exception as error:  # a record that does not load here (NumPy values): the sender finds it
        return pickle.dumps((None, None, pack_error(error), UNREADABLE), PROTOCOL)
    chunk = RecordChunk(start, keys, indices)
    chunk.items, chunk.origins = items, origins
    timings = []
    started = time.perf_counter()  # the process's clock: the worker thread reads the same one
    try:
        for step, index in steps:
            _STEPS[step](index, chunk)
            ended = time.perf_counter()
            timings.append((len(chunk.items), ended - started))
            started = ended
    except BaseException as error:  # a KeyboardInterrupt or SystemExit of a transform's
        # It stops the pipeline, as it does from a worker thread: sent as itself, not as
        # the subinterpreter's failure (`escaped`).
        return pickle.dumps((None, None, pack_error(error), None), PROTOCOL)
    what = "sending results from a subinterpreter"
    if each:
        blobs = []
        for j, item in enumerate(chunk.items):
            try:
                blobs.append(pickle.dumps(item, PROTOCOL))
            except Exception as error:  # it does not pickle: the chunk fails there (see `pickle_chunk`)
                chunk.fail(j, error, what)
                break
        chunk.items = blobs
    return pickle_chunk(chunk, lambda done: (*_reply(done), timings), what)


def loads_here(blob: bytes) -> bytes:
    """None if `blob` unpickles in this interpreter, else its error, packed (pickled)."""
    try:
        pickle.loads(blob)
    except Exception as error:
        return pickle.dumps(pack_error(error), PROTOCOL)
    return pickle.dumps(None, PROTOCOL)


def escaped(reply: tuple[Any, Any, PackedError | None, Any]) -> BaseException | None:
    """The exception that escaped the steps there (see `serve`), if any."""
    _, _, packed, timings = reply
    return unpack_error(packed) if timings is None and packed is not None else None


def _read(_: int, chunk: RecordChunk) -> None:
    read(_source, chunk)


def _before(index: int, chunk: RecordChunk) -> None:
    apply(_operations[index], chunk, _seed)


# The steps that run here (see `aioloader._program.steps`); the executor sends no others.
_STEPS: dict[Step, Callable[[int, RecordChunk], None]] = {Step.READ: _read, Step.BEFORE: _before}


def _reply(chunk: RecordChunk) -> tuple[Any, Any, PackedError | None]:
    packed = None if chunk.failure is None else pack_error(chunk.failure.error)
    return chunk.items, chunk.origins, packed


def pickle_chunk(chunk: RecordChunk, contents: Callable[[RecordChunk], object], what: str) -> bytes:
    """`contents(chunk)`, pickled; if an element does not pickle, its record fails
    there (`what` names the step) and the elements before it are sent."""
    try:
        return pickle.dumps(contents(chunk), PROTOCOL)
    except Exception:
        for j, item in enumerate(chunk.items):
            try:
                pickle.dumps(item, PROTOCOL)
            except Exception as error:
                chunk.fail(j, error, what)
                break
        return pickle.dumps(contents(chunk), PROTOCOL)


def pack_error(error: BaseException) -> PackedError:
    """`error` as it can cross: pickled if it pickles, its shape, and described as text."""
    try:
        blob: bytes | None = pickle.dumps(error, PROTOCOL)
    except BaseException:  # any: a `__reduce__` of the user's may raise anything
        blob = None
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    summary = traceback.TracebackException.from_exception(error)  # copes with a failing __str__
    summary.__notes__ = None  # the notes travel with the error itself
    notes = [_text(note) for note in getattr(error, "__notes__", None) or ()]
    return blob, _shape(error), f"{name}: {_text(error)}", notes, "".join(summary.format())


def _shape(error: BaseException) -> bytes | None:
    """The error's class (module and name), its `args` and the attributes that pickle: what
    makes an error of the same type where the error itself does not unpickle (the common
    `class MyError(Exception): def __init__(self, a, b)`, whose pickle calls it with one
    argument, or one holding a lock). An argument that does not pickle crosses as its repr."""
    kind = type(error)
    try:
        args = tuple(value if _pickles(value) else repr(value) for value in error.args)
        state = {key: value for key, value in vars(error).items() if _pickles(value)}
        return pickle.dumps((kind.__module__, kind.__qualname__, args, state), PROTOCOL)
    except BaseException:  # the user's `args`, `__repr__` or `__dict__` may raise anything
        return None


def _pickles(value: object) -> bool:
    try:
        pickle.dumps(value, PROTOCOL)
    except BaseException:
        return False
    return True


def _text(value: object) -> str:
    """`str(value)`, or what says it failed: an exception's message is the user's code."""
    try:
        return str(value)
    except BaseException as error:
        return f"<str() failed: {type(error).__name__}>"


def unpack_error(packed: PackedError) -> BaseException:
    """The error that `pack_error` packed: itself if it unpickles here, else a
    `SubinterpreterError` with its type name, message and notes; its
    traceback in the subinterpreter is the `__cause__`."""
    blob, shape, description, notes, trace = packed
    error = _unpickled(blob) or _rebuilt(shape)
    if error is None:
        error = SubinterpreterError(description)
        for note in notes:
            error.add_note(note)
    error.__cause__ = RemoteTraceback(trace)
    return error


def _unpickled(blob: bytes | None) -> BaseException | None:
    try:
        error = None if blob is None else pickle.loads(blob)
    except Exception:
        return None
    return error if isinstance(error, BaseException) else None


def _rebuilt(shape: bytes | None) -> BaseException | None:
    """An error of the class `_shape` names, with its `args` and attributes, made without
    calling its `__init__`; None if the class cannot be found here."""
    if shape is None:
        return None
    try:
        module, qualname, args, state = pickle.loads(shape)
        kind = importlib.import_module(module)
        for part in qualname.split("."):
            kind = getattr(kind, part)
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            return None
        error: BaseException = kind.__new__(kind, *args)
        error.args = args
        vars(error).update(state)
    except Exception:
        return None
    return error


def failure_of(packed: PackedError | None) -> Failure | None:
    """The failure a reply carries, if any."""
    return None if packed is None else Failure(unpack_error(packed))
