"""Ctrl-C stops the loaders, wherever the main thread is when it arrives.

A KeyboardInterrupt raised while the main thread waits in `next()` closes
the iterator there. But it usually arrives during the training step, and
then the traceback keeps the iterator alive as long as the exception is
handled; its threads would run on. So while sync iterators with threads are
running, SIGINT goes through a handler that has them closed and then does
what Python's default handler does: raise KeyboardInterrupt.

The handler does not close them itself: it runs in the main thread between
two bytecodes, perhaps inside `next()` while that holds the pipeline's lock,
and `close()` takes the same lock. A thread of its own closes them instead,
while the KeyboardInterrupt unwinds the main thread and releases the lock.

The handler is only installed in the main thread and only over Python's own
default handler, never over one the program set; it is put back when the last
iterator closes in the main thread. `signal` (its enums cost most of a millisecond
to import) loads with the first engine watched: `worker_count=0` needs it only once
its read threads start (a slow source, read ahead while the consumer works).
"""

from __future__ import annotations

import _thread
import threading
import weakref
from types import FrameType
from typing import Protocol


class Closable(Protocol):
    def close(self) -> None: ...


_running: weakref.WeakSet[Closable] = weakref.WeakSet()
_watched = False  # whether `watch` ever ran: until then no handler is ours, and `signal` not loaded


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def watch(engine: Closable) -> None:
    """Close `engine` when SIGINT arrives (if SIGINT has Python's default handler)."""
    global _watched
    import signal

    _watched = True
    _running.add(engine)
    if _in_main_thread() and _handler_is(signal.default_int_handler):
        signal.signal(signal.SIGINT, _interrupted)


def unwatch(engine: Closable) -> None:
    """Forget `engine`; restore Python's default handler when none is left."""
    _running.discard(engine)
    if not _watched:
        return
    import signal

    if not _running and _in_main_thread() and _handler_is(_interrupted):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _handler_is(handler: object) -> bool:
    """Whether SIGINT's handler is `handler`; False where other code left it unreadable (on
    3.11, `asyncio.run` that failed in its cleanup: the loaders run on, Ctrl-C stays theirs)."""
    import signal

    try:
        return signal.getsignal(signal.SIGINT) is handler
    except Exception:
        return False


def _interrupted(signum: int, frame: FrameType | None) -> None:
    import signal

    engines = list(_running)
    _running.clear()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # `_thread`, not `threading`: starting a `threading.Thread` takes a lock the
    # main thread may hold right now (if it was starting a thread itself).
    _thread.start_new_thread(_close, (engines,))
    signal.default_int_handler(signum, frame)


def _close(engines: list[Closable]) -> None:
    for engine in engines:
        engine.close()
