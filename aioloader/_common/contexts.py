"""A thread that the pipeline starts runs in a copy of its starter's context.

`threading.Thread` starts a thread in an empty context (before 3.14's
free-threaded build, which copies it by default). aioloader's own threads (workers,
read threads, prefetch and loop threads) copy the context of the thread that
starts them instead, so that they carry what the starter knew: which
iterators' `next()` they serve (`running`), whose jobs they do (`serve`), and
the user's own context variables, as an `async def` transform's task does.
The pipeline's own code calling its own iterator is known by these marks, and
refused: it would wait for itself, or restart the run under itself.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any


def in_this_context(target: Callable[..., Any]) -> Callable[..., Any]:
    """`target`, to run in a copy of the calling thread's current context."""
    return functools.partial(contextvars.copy_context().run, target)


# The iterators whose `next()` (`__anext__`, `start_prefetch()`) this context runs. The threads
# and tasks started meanwhile copy it: a call of one of those iterators from the pipeline's own
# code is known for what it is, and refused (it would wait for itself, or restart its own run).
_RUNNING: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar("aioloader_running", default=())


def running(iterator: object) -> contextvars.Token[tuple[int, ...]]:
    """Mark `iterator` as run by this context, until `done` with what this returns."""
    return _RUNNING.set((*_RUNNING.get(), id(iterator)))


def done(mark: contextvars.Token[tuple[int, ...]]) -> None:
    """End the mark that `running` made."""
    _RUNNING.reset(mark)


def runs(iterator: object) -> bool:
    """Whether this context runs `iterator` (or was copied from one that did)."""
    return id(iterator) in _RUNNING.get()


# The scheduler whose jobs this thread runs (a worker's, or a read thread's), or whose
# asynchronous segments this task awaits; the threads and tasks they start copy it.
_SERVING: contextvars.ContextVar[Any] = contextvars.ContextVar("aioloader_serving", default=None)


def working_for() -> Any:
    """The scheduler whose jobs this thread (a worker, a read thread, or a thread they
    started) runs, or whose asynchronous segments this task awaits; else None."""
    return _SERVING.get()


def serve(scheduler: Any) -> None:
    """Mark the running thread or task (and the ones it starts) as working for `scheduler`:
    the pipeline's own code, which must not wait for its own iterator. Each of aioloader's
    threads and tasks runs in a context of its own, which this changes."""
    _SERVING.set(scheduler)
