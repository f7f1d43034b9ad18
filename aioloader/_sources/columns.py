"""The `columns` argument of the table-like sources: which columns a record holds, in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def require_columns(columns: Any) -> tuple[str, ...] | None:
    """`columns` as a tuple of names, or None (all columns); an error naming `columns` otherwise."""
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise TypeError(f"`columns` must be a sequence of column names or None, got {columns!r}.")
    if not columns or not all(isinstance(c, str) for c in columns):
        raise ValueError(f"`columns` must name at least one column, each a str, got {columns!r}.")
    if len(set(columns)) != len(columns):
        raise ValueError(f"`columns` must not name a column twice, got {columns!r}.")
    return tuple(columns)


def choose_columns(columns: tuple[str, ...] | None, available: Sequence[str], where: str) -> list[str]:
    """The columns to read: `columns` if `where` (a file, a table) has them all, else all of them."""
    if columns is None:
        return list(available)
    missing = [c for c in columns if c not in available]
    if missing:
        raise ValueError(
            f"`columns` names {missing!r}, which {where} does not have; it has {list(available)!r}."
        )
    return list(columns)
