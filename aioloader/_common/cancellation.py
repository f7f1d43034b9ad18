"""What an async iterator does when the task awaiting it is cancelled (a timeout around
`anext`): the pipeline runs on, nothing it made is dropped, and no error it raised is lost.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import NoReturn


def cancelling(error: BaseException) -> bool:
    """True when `error` cancels the running task, not when the pipeline failed with a
    CancelledError of the user's (an `async def` map's cancelled request)."""
    import asyncio  # here: `for` never loads asyncio

    task = asyncio.current_task()
    return isinstance(error, asyncio.CancelledError) and task is not None and task.cancelling() > 0


class Unraised:
    """An error to raise once closing is done. Closing awaits the threads' ends, and a
    timeout around `anext` may cancel that await: the error is then kept (`error`), for
    the next `anext` to raise, instead of being lost (the next call answered the end)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    async def after(self, closing: Awaitable[None], error: BaseException) -> NoReturn:
        self.error = error
        await closing
        self.error = None
        raise error
