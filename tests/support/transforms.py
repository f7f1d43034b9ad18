"""Transforms and sources that the error tests and the `executor="interpreter"` tests share.

Module-level, and in a module that imports no pytest, so that subinterpreters
load them cheaply by reference. Each records nothing outside itself: a
subinterpreter has its own copy of this module. Some fail on purpose
(`FailOn`, `RaisesPicky`, `Unpicklable`, `BrokenSource`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from aioloader import FlatMapTransform, MapTransform, RandomMapTransform


class FailOn(MapTransform):
    """Raises `error` on the chosen record values."""

    def __init__(self, bad: set[int], error: type[BaseException] = ValueError) -> None:
        self.bad, self.error = bad, error

    def map(self, element: Any) -> Any:
        if element in self.bad:
            raise self.error(f"bad element {element}")
        return element


class StrFails(Exception):
    """An exception whose message cannot be made: `str()` of it raises."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


class RandomFailOn(RandomMapTransform):
    """A random map (so it runs in the main interpreter) that raises on the chosen values."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad

    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        if element in self.bad:
            raise KeyError(f"random map failed on {element}")
        return element


class Picky(Exception):
    """An exception that cannot be rebuilt from its args, as pickle tries to, and holds a
    lock (which does not pickle)."""

    def __init__(self, element: int, why: str) -> None:
        super().__init__(f"{why}: {element}")
        self.element, self.lock = element, threading.Lock()


class RaisesPicky(MapTransform):
    def map(self, element: Any) -> Any:
        if element == 4:
            raise Picky(element, "picky about")
        return element


class RaisesLocal(MapTransform):
    """Raises an error of a class made in `map`: no module has it by its name."""

    def map(self, element: Any) -> Any:
        if element == 4:
            raise type("Local", (Exception,), {})(f"local about: {element}")
        return element


class Unpicklable(MapTransform):
    """Returns a lock (which does not pickle) for record value 6."""

    def map(self, element: Any) -> Any:
        return threading.Lock() if element == 6 else element


def _rebuilt_there_only(value: Any) -> Any:
    """A result's reconstructor that fails in the main interpreter (a class that exists in the
    subinterpreter only, say)."""
    import _interpreters  # type: ignore[import-not-found]  # CPython 3.13+

    if _interpreters.get_current() == _interpreters.get_main():
        raise ValueError(f"{value} cannot be rebuilt in the main interpreter")
    return value


class LoadsThereOnly:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        return (_rebuilt_there_only, (self.value,))


class ReturnsWhatLoadsThereOnly(MapTransform):
    """Returns a result that does not load in the main interpreter for record value `at`."""

    def __init__(self, at: int) -> None:
        self.at = at

    def map(self, element: Any) -> Any:
        return LoadsThereOnly(element) if element == self.at else element


class UsesNumpy(MapTransform):
    def map(self, element: Any) -> Any:
        return np.int64(element)


class HoldsAnArray(MapTransform):
    """Picklable, but loading it needs NumPy."""

    def __init__(self) -> None:
        self.table = np.arange(4)

    def map(self, element: Any) -> Any:
        return element


class Pair(FlatMapTransform):
    """Each element twice."""

    def flat_map(self, element: Any) -> Iterable[Any]:
        return [element, element]


class LenIs:
    """A source whose `__len__` says `length`, whatever that is (hostile tests)."""

    def __init__(self, length: Any) -> None:
        self.length = length

    def __len__(self) -> Any:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


class ServesFewer:
    """A source that lies: its `__len__` says `length`, but it serves the first `served`
    records only (reading past them raises IndexError)."""

    def __init__(self, length: int, served: int) -> None:
        self.length, self.served = length, served

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, key: int) -> int:
        if key >= self.served:
            raise IndexError(key)
        return key


class BrokenSource:
    """Picklable, so it is read in the subinterpreters; the chosen keys cannot be read."""

    def __init__(self, size: int, bad: set[int]) -> None:
        self.size, self.bad = size, bad

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int) -> int:
        if key in self.bad:
            raise OSError(f"cannot read key {key}")
        return key


def shout(text: str) -> str:
    return text.upper()


def count_primes_below(n: int) -> int:
    """Pure-Python CPU work on small ints (the benchmarks' workload)."""
    found = 0
    for candidate in range(2, n):
        divisor = 2
        while divisor * divisor <= candidate:
            if candidate % divisor == 0:
                break
            divisor += 1
        else:
            found += 1
    return found


class Identity(MapTransform):
    def map(self, element: Any) -> Any:
        return element


def is_long(text: str) -> bool:
    return len(text) > 2


class SlowRecords(MapTransform):
    """Each record waits `seconds` (as a call to a server would); `entered` is set once
    a record from `first` on has started. One object serves every worker."""

    def __init__(self, seconds: float, first: int = 0) -> None:
        self.seconds, self.first = seconds, first
        self.entered = threading.Event()

    def __deepcopy__(self, memo: dict[int, Any]) -> SlowRecords:
        return self

    def map(self, element: Any) -> Any:
        if element >= self.first:
            self.entered.set()
        time.sleep(self.seconds)
        return element


class Boom(Exception):
    """A parent's own error, raised by `explode_at`."""


def explode_at(bad: int) -> Callable[[int], int]:
    """A map that raises `Boom` on the element `bad` and passes the others."""

    def check(x: int) -> int:
        if x == bad:
            raise Boom(f"element {x}")
        return x

    return check
