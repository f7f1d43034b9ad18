"""Public names that load on first use: a module's `__getattr__` and `__dir__` over a table.

A user's script pays for `import aioloader` before its first batch, so the public
modules import what `DataLoader(...)` and `for batch in loader` need, and name the rest
in a table of `name -> module`, imported the first time the name is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection
from typing import Any


def lazy_names(
    owner: str,
    table: dict[str, str],
    namespace: dict[str, Any],
    submodules: Collection[str] = (),
    unlisted: dict[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for the module `owner`, whose globals are `namespace`.

    A name of `table` is imported from its module when first asked for, then kept in
    `namespace` (later lookups never reach `__getattr__`); a name of `submodules` is
    the submodule `owner.name`, imported then (`import aioloader as grain` and then
    `grain.transforms` work as with Grain). `dir()` lists `table`'s names, not the
    submodules (one may need an optional dependency), nor the names of `unlisted`, loaded as
    `table`'s but from modules that need one. Any other name is an AttributeError, as for
    a plain module."""
    hidden = unlisted or {}

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{owner}.{name}")  # the import sets namespace[name]
        module = table.get(name) or hidden.get(name)
        if module is None:
            raise AttributeError(f"module {owner!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
