"""What a new subinterpreter runs first, before anything imports aioloader.

It gets the parent's `sys.path`, so that it imports the same modules (the
user's transforms among them), and a stand-in for NumPy where NumPy cannot
load. NumPy's extension modules refuse isolated subinterpreters ("does not
support loading in subinterpreters"), yet aioloader and most transform
modules import numpy at the top. With the stand-in, `import numpy` works and
only using it raises an ImportError that says why and what to do: the
per-record code that runs in a subinterpreter must not need NumPy.

Standard library only: this file is run by path (`runpy.run_path`), because
importing any aioloader module first runs the package's `__init__`, which
imports NumPy.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence

ADVICE = 'NumPy-based transforms belong on executor="thread"'


class Unavailable(types.ModuleType):
    """Stands in for a module that failed to import: importing it works, using it raises.

    Dunder lookups other than `__path__` raise AttributeError as usual, so
    that tools probing modules (pickle, inspect) pass over it quietly.
    """

    def __init__(self, name: str, error: ImportError) -> None:
        super().__init__(name)
        self.__error = error

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__") and attribute != "__path__":
            raise AttributeError(attribute)
        raise ImportError(
            f"{self.__name__} cannot be used in a subinterpreter ({self.__error}); {ADVICE}.",
            name=self.__name__,
        )


def prepare(path: Sequence[str]) -> None:
    """Use the parent's import path, and put the stand-in in place if NumPy cannot load."""
    sys.path[:] = path
    try:
        import numpy  # noqa: F401 - only to learn whether it loads here
    except ImportError as error:
        sys.modules["numpy"] = Unavailable("numpy", _root_cause(error))


def _root_cause(error: ImportError) -> ImportError:
    """NumPy wraps the refusal in a page of advice about broken installs: keep the refusal."""
    cause = error.__cause__
    return cause if isinstance(cause, ImportError) else error
