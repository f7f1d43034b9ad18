"""Errors from reads and transforms, carried as values to the consumer.

A failure is raised in the consumer's thread in output order: every output
before it is delivered first. The user's exception keeps its type and its
traceback; a note (PEP 678, shown under the traceback) names the operation
and the record's index and key. A StopIteration or StopAsyncIteration becomes
a RuntimeError from it (`stray_stop`): raised in the consumer, it would end
the iteration as if the data were over.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from aioloader._common.calls import stray_stop


def note(error: BaseException, text: str) -> None:
    """`error.add_note(text)`, which must not fail: the user's error is what the consumer
    needs. An exception whose `__notes__` is not a list (a tuple breaks `add_note`) gets a
    list with the note added; one that takes no attribute travels without the note."""
    try:
        error.add_note(text)
    except Exception:
        # If it cannot hold a note either, its type, message and traceback still tell.
        with contextlib.suppress(Exception):
            error.__notes__ = [*getattr(error, "__notes__", ()), text]


class Failure(NamedTuple):
    """The first error in a chunk or a batch job, by output order."""

    error: BaseException

    @classmethod
    def at_record(cls, error: BaseException, what: str, index: int, key: object) -> Failure:
        """An error of `what` (a read, or an operation's label) on one record (a text key
        quoted: a user's sampler's key "0" is not the int 0)."""
        error = stray_stop(error, what)
        shown = repr(key) if isinstance(key, str | bytes) else key
        note(error, f"aioloader: {what} failed on the record with index={index}, record_key={shown}")
        return cls(error)

    @classmethod
    def at_batch(cls, error: BaseException, what: str, first: int, last: int) -> Failure:
        """An error of `what` on the batch of records with indices `first..last`."""
        error = stray_stop(error, what)
        note(error, f"aioloader: {what} failed on the batch of records with index={first}..{last}")
        return cls(error)
