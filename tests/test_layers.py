"""The package's imports point down its layers, never up (TYPE_CHECKING imports count).

A folder is a layer; a module may import its own layer and those listed
before it. The order is the pipeline's (see aioloader/README.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "aioloader"
LAYERS = [
    "_common",
    "_observability",  # counters that every stage writes into: only `_common` below them
    "_sampling",
    "_sources",
    "_operations",
    "_program",
    "_scheduling",
    "_executors",
    "_device",
    "_iteration",
    "_loader",
    "_dataset",
    "",  # the public modules: __init__, checkpoint, report and Grain's namespaces
]
PUBLIC_MODULES = {"checkpoint", "report", "transforms", "samplers", "sharding", "sources", "experimental"}


def layer_of(module: str) -> int:
    """The rank of `aioloader.<...>` in `LAYERS`."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else ""
    return LAYERS.index(name if name in LAYERS else "")


def module_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every aioloader name that `tree` imports (`from a import b` gives `a.b`), in line order."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = module.split(".")
            base = parts[: len(parts) - node.level + is_package] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{source}.{alias.name}") for alias in node.names]
    return [name for _, name in sorted(found) if name.split(".")[0] == "aioloader"]


def upward_imports(module: str, source: str, is_package: bool = False) -> list[str]:
    """The imports in `source` (the text of `module`) that run back up the layers."""
    rank = layer_of(module)
    names = imported(ast.parse(source), module, is_package)
    return [f"{module} imports {name}" for name in names if layer_of(name) > rank]


def test_every_module_belongs_to_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        module = module_of(path)
        top = module.split(".")[1] if "." in module else ""
        assert top in LAYERS or top in PUBLIC_MODULES, module


def test_no_import_runs_back_up_the_layers() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        problems += upward_imports(module_of(path), path.read_text(), path.name == "__init__.py")
    assert problems == []


def test_the_check_sees_upward_imports_of_every_kind() -> None:
    source = """
from typing import TYPE_CHECKING
from aioloader._program.jobs import Outputs
import aioloader._iteration.spec
from .. import _loader
if TYPE_CHECKING:
    from aioloader._scheduling.scheduler import Scheduler
from aioloader import DataLoader
"""
    assert upward_imports("aioloader._program.program", source) == [
        "aioloader._program.program imports aioloader._iteration.spec",
        "aioloader._program.program imports aioloader._loader",
        "aioloader._program.program imports aioloader._scheduling.scheduler.Scheduler",
        "aioloader._program.program imports aioloader.DataLoader",
    ]
