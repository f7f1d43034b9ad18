"""A thread that the pipeline starts runs in a copy of its starter's context.

`threading.Thread` starts a thread in an empty context (before 3.14's
free-threaded build, which copies it by default). aioloader's own threads (workers,
read threads, prefetch and loop threads) copy the context of the thread that
starts them instead, so that they carry what the starter knew: which
iterators' `next()` they serve (see `_dataset/iterator`), and the user's own
context variables, as an `async def` transform's task does.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any


def in_this_context(target: Callable[..., Any]) -> Callable[..., Any]:
    """`target`, to run in a copy of the calling thread's current context."""
    return functools.partial(contextvars.copy_context().run, target)
