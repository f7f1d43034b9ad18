"""`SQLiteDataSource`: the rows of a SQLite table, by index, as dicts of column to value.

Key `k` is the table's `k`-th row in rowid order. The rowids are read once, when
the source is made (just their range when they run without gaps, as they do in a
table that was only ever appended to); a batch of keys is then one
`SELECT ... WHERE rowid IN (...)` per few hundred keys.

Thread safety: a SQLite connection must not be used by two threads at once, so
the source keeps a pool of read-only connections and each read takes one for
itself, returning it after; there are never more connections than reads at once.
The table must not change while the source reads it: a row that disappeared is
an error naming it, never another row in its place. SQLite keeps no checksums:
a damaged database may give changed values without a word; what SQLite itself
finds ("database disk image is malformed") is raised with the file named.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aioloader._common.failures import note
from aioloader._sources.columns import choose_columns, require_columns
from aioloader._sources.keys import require_key

_KEYS_PER_QUERY = 500  # below SQLite's smallest limit on parameters per statement (999)
_ROWID_NAMES = ("rowid", "_rowid_", "oid")  # a column may hide one name; SQLite offers three


class SQLiteDataSource:
    """The rows of `table` in the SQLite database at `path`, in rowid order: dicts of
    column name to value (`columns`, all of them by default), with values as the
    `sqlite3` module gives them (int, float, str, bytes, None).

    The database is opened read-only. `close()` (or leaving a `with` block) closes
    its connections; so does garbage collection. Pickling a source makes a new one
    over the same file, which reads the rowids again.
    """

    def __init__(self, path: str | Path, table: str, columns: Sequence[str] | None = None) -> None:
        if not isinstance(path, (str, Path)):
            raise TypeError(f"`path` must be a str or a Path, got {type(path).__name__}.")
        if not isinstance(table, str) or not table:
            raise TypeError(f"`table` must be a table name (a non-empty str), got {table!r}.")
        self.path, self.table = str(path), table
        self._pool = _Pool(_read_only_uri(self.path))
        weakref.finalize(self, self._pool.close)
        where = f"table {table!r} of `{path}`"
        with self._pool.connection() as connection:
            names = _table_columns(connection, self.path, table)
            self.columns = tuple(choose_columns(require_columns(columns), names, where))
            self._rowid = _rowid_name(names, where)
            self._rowids = _RowIds.read(connection, self._rowid, _quote(table), where)
        quoted = ", ".join(map(_quote, self.columns))
        self._select = f"SELECT {self._rowid}, {quoted} FROM {_quote(table)} WHERE {self._rowid} IN "

    def __len__(self) -> int:
        return self._rowids.length

    def __getitem__(self, key: int) -> dict[str, Any]:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at `keys`, in order (a key may repeat)."""
        rowids = [self._rowids.at(require_key(key, len(self))) for key in keys]
        found: dict[int, tuple[Any, ...]] = {}
        with self._pool.connection() as connection:
            for start in range(0, len(rowids), _KEYS_PER_QUERY):
                part = sorted(set(rowids[start : start + _KEYS_PER_QUERY]) - found.keys())
                if part:
                    query = self._select + f"({', '.join('?' * len(part))})"
                    try:
                        found.update((row[0], row[1:]) for row in connection.execute(query, part))
                    except sqlite3.DatabaseError as error:  # "database disk image is malformed", ...
                        note(error, f"aioloader: reading table {self.table!r} of `{self.path}`")
                        raise
        return [self._row(found, rowid, key) for rowid, key in zip(rowids, keys, strict=True)]

    def _row(self, found: dict[int, tuple[Any, ...]], rowid: int, key: int) -> dict[str, Any]:
        values = found.get(rowid)
        if values is None:
            raise KeyError(
                f"row {key} (rowid {rowid}) is no longer in table {self.table!r} of `{self.path}`: "
                "the table changed after the SQLiteDataSource was made."
            )
        return dict(zip(self.columns, values, strict=True))

    def close(self) -> None:
        """Close the connections; idempotent. A read after it opens a new one."""
        self._pool.close()

    def __enter__(self) -> SQLiteDataSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.table, self.columns))

    def __repr__(self) -> str:
        return f"SQLiteDataSource({self.path!r}, {self.table!r}, columns={list(self.columns)!r})"


class _Pool:
    """Read-only connections, each used by one thread at a time."""

    def __init__(self, uri: str) -> None:
        self._uri = uri
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """An idle connection (or a new one) for the caller alone, until the block ends."""
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        if connection is None:
            # check_same_thread=False: a connection moves between threads, but the pool
            # never lends it to two at once.
            connection = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
        try:
            yield connection
        finally:
            with self._lock:
                self._idle.append(connection)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class _RowIds:
    """Key -> rowid: an offset when the rowids run without gaps, else a sorted array."""

    def __init__(self, length: int, first: int, table: np.ndarray | None) -> None:
        self.length, self._first, self._table = length, first, table

    @classmethod
    def read(cls, connection: sqlite3.Connection, rowid: str, table: str, where: str) -> _RowIds:
        """The rowids of `table` (quoted), read with `connection`; `where` names it in errors."""
        try:
            low, high, count = connection.execute(
                f"SELECT min({rowid}), max({rowid}), count(*) FROM {table}"
            ).fetchone()
        except sqlite3.OperationalError as error:  # "no such column: rowid"
            raise ValueError(f"{where} has no rowid (a WITHOUT ROWID table?): {error}") from error
        if count == 0 or high - low + 1 == count:
            return cls(count, low or 0, None)
        cursor = connection.execute(f"SELECT {rowid} FROM {table} ORDER BY {rowid}")
        return cls(count, 0, np.fromiter((r for (r,) in cursor), dtype=np.int64, count=count))

    def at(self, key: int) -> int:
        return self._first + key if self._table is None else int(self._table[key])


def _read_only_uri(path: str) -> str:
    """A `file:` URI that opens the database at `path` read-only, or an error naming it."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"`path` {path!r} is not a file.")
    return f"{file.resolve().as_uri()}?mode=ro"


def _table_columns(connection: sqlite3.Connection, path: str, table: str) -> list[str]:
    """The columns of `table`, after checking that `path` is a SQLite database that has it."""
    try:
        rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        tables = [name for (name,) in rows]
    except sqlite3.DatabaseError as error:
        raise ValueError(f"`path` {path!r} is not a readable SQLite database: {error}") from error
    if table not in tables:
        raise ValueError(f"`table` {table!r} is not a table of `{path}`; it has {sorted(tables)!r}.")
    return [row[1] for row in connection.execute(f"PRAGMA table_info({_quote(table)})")]


def _rowid_name(columns: list[str], where: str) -> str:
    """A name of the rowid that no column of the table hides; an error for WITHOUT ROWID tables."""
    free = [name for name in _ROWID_NAMES if name.lower() not in {c.lower() for c in columns}]
    if not free:
        raise ValueError(f"{where} has columns named rowid, _rowid_ and oid: no name is left for the rowid.")
    return free[0]


def _quote(identifier: str) -> str:
    """`identifier` as a quoted SQL identifier, whatever characters it holds."""
    return '"' + identifier.replace('"', '""') + '"'
