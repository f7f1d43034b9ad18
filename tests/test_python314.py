"""Ready for CPython 3.14: no API that 3.14 deprecates or changes, in any of the project's code.

The sessions here run 3.11 and 3.13 (3.14's source is not served to these
machines), and pytest turns warnings into errors: a call that warns only on
3.14 would fail a 3.14 user's test run without failing ours. This reads the
code instead, so that such a call fails here too.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ["aioloader", "tests", "tools", "examples", "benchmarks"]

# Deprecated in 3.14 (or earlier, to be removed), with what to use instead.
DEPRECATED = {
    "asyncio.iscoroutinefunction": "inspect.iscoroutinefunction (deprecated in 3.14)",
    "asyncio.get_event_loop_policy": "asyncio.run or asyncio.Runner (policies are deprecated in 3.14)",
    "asyncio.set_event_loop_policy": "asyncio.run(..., loop_factory=...) (policies are deprecated in 3.14)",
    "asyncio.AbstractEventLoopPolicy": "asyncio.Runner with loop_factory (deprecated in 3.14)",
    "asyncio.DefaultEventLoopPolicy": "asyncio.Runner with loop_factory (deprecated in 3.14)",
    "asyncio.get_event_loop": "asyncio.get_running_loop (3.14 raises without a current loop)",
    "codecs.open": "open (deprecated in 3.14)",
    "argparse.FileType": "a path argument, opened after parsing (deprecated in 3.14)",
    "datetime.utcnow": "datetime.now(timezone.utc) (deprecated in 3.12)",
    "datetime.utcfromtimestamp": "datetime.fromtimestamp(t, timezone.utc) (deprecated in 3.12)",
}


def python_files() -> list[Path]:
    return sorted(path for folder in FOLDERS for path in (REPO / folder).rglob("*.py"))


def dotted_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """`module.name` for each attribute of an imported module and each `from module import name`."""
    aliases = {"asyncio": "asyncio", "codecs": "codecs", "argparse": "argparse", "datetime": "datetime"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({alias.asname or alias.name: alias.name for alias in node.names})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            yield node.lineno, f"{aliases[node.value.id]}.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def jumps_out_of_finally(tree: ast.AST) -> Iterator[int]:
    """Lines of `return`, `break` or `continue` that leave a `finally` block: a SyntaxWarning
    on 3.14 (PEP 765), so an error where warnings are errors."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Try | ast.TryStar):
            for statement in node.finalbody:
                yield from _jumps(statement, in_loop=False)


def _jumps(node: ast.AST, in_loop: bool) -> Iterator[int]:
    if isinstance(node, ast.Return) or (isinstance(node, ast.Break | ast.Continue) and not in_loop):
        yield node.lineno
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
        return  # a jump in a nested function leaves that function, not the finally block
    for child in ast.iter_child_nodes(node):
        loop_body = isinstance(node, ast.For | ast.AsyncFor | ast.While) and child not in node.orelse
        yield from _jumps(child, in_loop or loop_body)


def extractall_without_filter(tree: ast.AST) -> Iterator[int]:
    """`tarfile`'s extract/extractall without `filter=`: its default changes in 3.14."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in {"extract", "extractall"} and all(k.arg != "filter" for k in node.keywords):
            yield node.lineno


def findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(REPO)
    found = [
        f"{where}:{line}: {name} -> {DEPRECATED[name]}"
        for line, name in dotted_names(tree)
        if name in DEPRECATED
    ]
    found += [
        f"{where}:{line}: return/break/continue leaves a finally block" for line in jumps_out_of_finally(tree)
    ]
    found += [f"{where}:{line}: extract without filter=" for line in extractall_without_filter(tree)]
    return found


def test_no_api_deprecated_in_314() -> None:
    found = [finding for path in python_files() for finding in findings(path)]
    assert not found, "\n".join(found)


def test_every_file_compiles_without_a_warning() -> None:
    """SyntaxWarnings (invalid escapes, `is` with a literal, ...) are errors for a user with -W error."""
    for path in python_files():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(path.read_text(), str(path), "exec", dont_inherit=True)


@pytest.mark.parametrize(
    ("source", "count"),
    [
        ("import asyncio\nasyncio.iscoroutinefunction(f)", 1),
        ("import asyncio as aio\naio.get_event_loop()", 1),
        ("from asyncio import iscoroutinefunction", 1),
        ("import inspect\ninspect.iscoroutinefunction(f)", 0),
        ("try:\n    pass\nfinally:\n    return 1", 1),
        ("for x in y:\n    try:\n        pass\n    finally:\n        break", 1),
        ("try:\n    pass\nfinally:\n    for x in y:\n        break", 0),
        ("try:\n    pass\nfinally:\n    def f():\n        return 1", 0),
        ("tar.extractall(path)", 1),
        ("tar.extractall(path, filter='data')", 0),
    ],
)
def test_the_checks_find_what_they_look_for(source: str, count: int) -> None:
    tree = ast.parse(source)
    names = [name for _, name in dotted_names(tree) if name in DEPRECATED]
    assert (
        len(names) + len(list(jumps_out_of_finally(tree))) + len(list(extractall_without_filter(tree)))
        == count
    )
