"""Errors from reads and transforms, carried as values to the consumer.

A failure is raised in the consumer's thread in output order: every output
before it is delivered first. The user's exception keeps its type and its
traceback; a note (PEP 678, shown under the traceback) names the operation
and the record's index and key.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a user's read or transform raises that travels to the consumer as its failure, in
# order: every Exception, and SystemExit and GeneratorExit, which user code can only raise
# on purpose (a transform's `sys.exit()` is its error, not the process's). KeyboardInterrupt
# is not carried: Ctrl-C must stop the loader at once, not after the outputs before it.
USER_ERRORS = (Exception, SystemExit, GeneratorExit)


def stop_iteration_error(what: str) -> RuntimeError:
    """The error for a user function that raised StopIteration inside a loop that it ended
    silently (`list.extend` over a `map` takes StopIteration for the end): as PEP 479 does
    for generators, it becomes a RuntimeError, so that no element goes missing unnoticed."""
    return RuntimeError(
        f"{what} raised StopIteration; a read or a transform must not raise it "
        "(it would end the iteration early and lose the elements after it)"
    )


@dataclass
class Failure:
    """The first error in a chunk or a batch job, by output order."""

    error: BaseException

    @classmethod
    def at_record(cls, error: BaseException, what: str, index: int, key: int | None) -> Failure:
        """An error of `what` (a read, or an operation's label) on one record."""
        error = _raisable(error, what)
        error.add_note(f"aioloader: {what} failed on the record with index={index}, record_key={key}")
        return cls(error)

    @classmethod
    def at_batch(cls, error: BaseException, what: str, first: int, last: int) -> Failure:
        """An error of `what` on the batch of records with indices `first..last`."""
        error = _raisable(error, what)
        error.add_note(f"aioloader: {what} failed on the batch of records with index={first}..{last}")
        return cls(error)


def _raisable(error: BaseException, what: str) -> BaseException:
    """`error`, or, for a StopIteration, which `next()` in the consumer would pass off as the
    end of the data, a RuntimeError caused by it."""
    if isinstance(error, (StopIteration, StopAsyncIteration)):
        wrapped = stop_iteration_error(what)
        wrapped.__cause__ = error
        return wrapped
    return error
