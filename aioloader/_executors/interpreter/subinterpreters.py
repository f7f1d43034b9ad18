"""Isolated subinterpreters behind one small interface, whichever module this Python has.

* CPython 3.14+: `concurrent.interpreters` (PEP 734). `Interpreter.call`
  sends the arguments and the result across (bytes are shared as is).
* CPython 3.13: the low-level `_interpreters` module, whose `call` returns
  no result. The argument and the result go through one buffer that the
  main interpreter shares with the subinterpreter (a writable memoryview),
  each as its size and then its bytes; a result too large for the buffer
  stays behind until the main interpreter shares a larger one. A call then
  costs one switch into the subinterpreter (binding names in its `__main__`
  would cost another: about 2 us each on CPython 3.13.0, 0.5 ms on 3.13t).

Either way a `Subinterpreter` has its own GIL ("isolated", PEP 684), runs in
the thread that calls it (which switches into it and back), starts with the
parent's `sys.path` and NumPy's stand-in (see `_subinterpreter_prelude`),
and is destroyed by `close()`. Its functions take bytes and return bytes:
the caller chooses what to pickle.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from types import CodeType, ModuleType, TracebackType
from typing import Any

from aioloader._executors.interpreter import prelude as _subinterpreter_prelude

# Run in every new subinterpreter: the prelude by path, before anything imports aioloader.
_BOOTSTRAP = "import runpy\nrunpy.run_path(_aioloader_prelude)['prepare'](_aioloader_path)\n"
_HEADER = 8  # bytes of the result's size, at the start of the shared buffer (3.13)
_FIRST_BUFFER = 1 << 20
# One subinterpreter is created or destroyed at a time in this process: CPython
# 3.13.0 sometimes fails `interpreter creation failed` when threads do it at once
# (cpython gh-109700, fixed in later releases). A worker does each once, so the
# lock costs a few milliseconds at start, never a record.
_LIFECYCLE = threading.Lock()


class SubinterpreterError(RuntimeError):
    """Something failed inside a subinterpreter, or on the way in or out.

    The exception raised there cannot cross as itself: its type name and
    message make this one's message, and the subinterpreter's traceback,
    as text, is its `__cause__`.
    """

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        if traceback:
            self.__cause__ = RemoteTraceback(traceback)

    @classmethod
    def from_excinfo(cls, excinfo: Any) -> SubinterpreterError:
        """From the summary of an uncaught exception that `_interpreters` gives."""
        name, message = excinfo.type.__name__, excinfo.msg
        return cls(f"{name}: {message}" if message else name, excinfo.errdisplay or "")


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a subinterpreter, as text.

    Set as the `__cause__` of the exception that arrives, so that Python
    prints where it was raised above where it was re-raised.
    """

    def __init__(self, traceback: str) -> None:
        super().__init__(traceback)
        self.traceback = traceback

    def __str__(self) -> str:
        return f'\n"""\n{self.traceback.rstrip()}\n"""'


def unavailable() -> str | None:
    """Why this Python cannot run isolated subinterpreters, or None when it can."""
    if _module() is not None:
        return None
    version = ".".join(map(str, sys.version_info[:3]))
    return (
        f"{sys.implementation.name} {version} has no subinterpreters: they need CPython 3.13+ "
        f"(the `_interpreters` module) or 3.14+ (`concurrent.interpreters`)"
    )


def _module() -> ModuleType | None:
    for name in ("concurrent.interpreters", "_interpreters"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


class Subinterpreter:
    """One isolated subinterpreter, driven by the thread that calls it; a context manager."""

    def __init__(self) -> None:
        module = _module()
        if module is None:
            raise SubinterpreterError(unavailable() or "")
        high_level = module.__name__ == "concurrent.interpreters"
        self._backend: _HighLevel | _LowLevel = _HighLevel(module) if high_level else _LowLevel(module)
        try:
            path = tuple(entry for entry in sys.path if isinstance(entry, str))
            self.run(_BOOTSTRAP, _aioloader_prelude=_subinterpreter_prelude.__file__, _aioloader_path=path)
            self._backend.ready()
        except BaseException:
            self.close()
            raise

    def run(self, code: str, **names: object) -> None:
        """Bind `names` (shareable: bytes, str, int, tuples of them) in its `__main__`, then run `code`."""
        self._backend.run(code, names)

    def call(self, function: Callable[[bytes], bytes], data: bytes) -> bytes:
        """`function(data)` run in the subinterpreter; `function` is module-level, found there by name."""
        return self._backend.call(function, data)

    def close(self) -> None:
        """Destroy the subinterpreter (idempotent)."""
        self._backend.close()

    def __enter__(self) -> Subinterpreter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _HighLevel:
    """CPython 3.14+: `concurrent.interpreters`."""

    def __init__(self, interpreters: ModuleType) -> None:
        self._failed: Any = interpreters.ExecutionFailed
        with _LIFECYCLE:
            self._interpreter: Any = interpreters.create()  # isolated, with its own GIL, by default

    def ready(self) -> None:
        pass

    def run(self, code: str, names: dict[str, object]) -> None:
        try:
            if names:
                self._interpreter.prepare_main(names)
            self._interpreter.exec(code)
        except self._failed as failed:
            raise SubinterpreterError.from_excinfo(failed.excinfo) from None

    def call(self, function: Callable[[bytes], bytes], data: bytes) -> bytes:
        try:
            result = self._interpreter.call(function, data)
        except self._failed as failed:
            raise SubinterpreterError.from_excinfo(failed.excinfo) from None
        return bytes(result)

    def close(self) -> None:
        interpreter, self._interpreter = self._interpreter, None
        if interpreter is not None:
            with _LIFECYCLE:
                interpreter.close()


class _LowLevel:
    """CPython 3.13: `_interpreters`, with results coming back through a shared buffer."""

    def __init__(self, interpreters: ModuleType) -> None:
        self._interpreters = interpreters
        with _LIFECYCLE:
            self._id: int | None = interpreters.create(interpreters.new_config("isolated"))
        self._buffer = bytearray()
        self._calls: dict[Callable[[bytes], bytes], CodeType] = {}

    def ready(self) -> None:
        # Importing `_interpreters` there lets it receive the buffer as a memoryview.
        self.run(
            "import _interpreters\nfrom aioloader._executors.interpreter.subinterpreters import put, take", {}
        )
        self._share(_FIRST_BUFFER)

    def _share(self, size: int) -> None:
        self._buffer = bytearray(size)
        self.run("pass", {"_aioloader_buffer": memoryview(self._buffer)})

    def run(self, code: str | CodeType, names: dict[str, object]) -> None:
        if names:
            self._interpreters.set___main___attrs(self._id, names)
        excinfo = self._interpreters.exec(self._id, code)
        if excinfo is not None:
            raise SubinterpreterError.from_excinfo(excinfo)

    def call(self, function: Callable[[bytes], bytes], data: bytes) -> bytes:
        if _HEADER + len(data) > len(self._buffer):
            self._share(2 * (_HEADER + len(data)))
        put(memoryview(self._buffer), data)
        self.run(self._call_code(function), {})
        result = take(memoryview(self._buffer))
        if result is None:  # too large: share a buffer that holds it, and have it written again
            self._share(2 * (_HEADER + _size(self._buffer)))
            self.run("put(_aioloader_buffer, _aioloader_result)", {})
            result = take(memoryview(self._buffer))
            assert result is not None
        return result

    def _call_code(self, function: Callable[[bytes], bytes]) -> CodeType:
        # Compiled once: a code object runs in about a third of the time of its source.
        code = self._calls.get(function)
        if code is None:
            module, name = function.__module__, function.__qualname__
            source = (
                f"import {module}\n"
                f"_aioloader_result = {module}.{name}(take(_aioloader_buffer))\n"
                "put(_aioloader_buffer, _aioloader_result)\n"
            )
            code = self._calls[function] = compile(source, f"<call {module}.{name}>", "exec")
        return code

    def close(self) -> None:
        interpreter_id, self._id = self._id, None
        if interpreter_id is not None:
            with _LIFECYCLE:
                self._interpreters.destroy(interpreter_id)


def put(buffer: memoryview, data: bytes) -> None:
    """Write `data`'s size into the shared buffer, and `data` after it if it fits (3.13)."""
    buffer[:_HEADER] = len(data).to_bytes(_HEADER, "little")
    if _HEADER + len(data) <= len(buffer):
        buffer[_HEADER : _HEADER + len(data)] = data


def take(buffer: memoryview) -> bytes | None:
    """The bytes that `put` wrote into the shared buffer, or None if they did not fit (3.13)."""
    size = _size(buffer)
    return bytes(buffer[_HEADER : _HEADER + size]) if _HEADER + size <= len(buffer) else None


def _size(buffer: memoryview | bytearray) -> int:
    return int.from_bytes(buffer[:_HEADER], "little")
