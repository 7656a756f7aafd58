"""Row codec and synchronous query helpers of the store (run on the store's thread only).

One generic path turns rows into Structs: a row becomes a ``{column: value}`` mapping, the
JSON columns are decoded, and ``msgspec.convert`` validates the mapping into the requested
type. Writes go the other way through :func:`params`. SQL text is assembled only from the
constant column names below, never from values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import duckdb
import msgspec

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)
Con = duckdb.DuckDBPyConnection

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

#: Columns stored as VARCHAR holding JSON, in whichever table they appear.
JSON_COLUMNS = frozenset(
    {
        "elasticity",
        "labels",
        "queues",
        "detail",
        "placement",
        "resources",
        "running",
        "defaults",
        "launched_with",
    }  # fmt: skip
)

#: The column order of a tuple given to ``Store.append_invocation_events``.
INVOCATION_EVENT_COLUMNS = ("namespace", "queue", "invocation_id", "ts", "type", "attempt",
                            "worker", "epoch", "detail")  # fmt: skip
_INVOCATION_EVENT_TYPES = ("VARCHAR", "VARCHAR", "VARCHAR", "TIMESTAMPTZ", "VARCHAR", "INTEGER",
                           "VARCHAR", "BIGINT", "VARCHAR")  # fmt: skip

# Every UNNEST in one SELECT list advances in step, so the nine column lists zip back into
# rows. One statement per batch ingests about 100x faster than executemany, which DuckDB
# runs as one statement per row.
INSERT_INVOCATION_EVENTS = "INSERT INTO invocation_events SELECT " + ", ".join(
    f"UNNEST(?::{t}[])" for t in _INVOCATION_EVENT_TYPES
)


def select(table: str, cols: Sequence[str]) -> str:
    return f"SELECT {', '.join(cols)} FROM {table}"


def insert(table: str, cols: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


def update(table: str, cols: Sequence[str], key: Sequence[str]) -> str:
    sets = ", ".join(f"{c} = ?" for c in cols)
    return f"UPDATE {table} SET {sets} WHERE {' AND '.join(f'{k} = ?' for k in key)}"


def to_json(value: Any) -> str:
    """Encode a JSON column's value (VARCHAR, hence ``str`` rather than ``bytes``)."""
    return _encoder.encode(value).decode()


def from_json(text: str | None) -> Any:
    return None if text is None else _decoder.decode(text)


def params(obj: msgspec.Struct, cols: Sequence[str]) -> list[Any]:
    """The values of ``cols`` taken from ``obj``, JSON columns encoded."""
    out = []
    for col in cols:
        value = getattr(obj, col)
        out.append(to_json(value) if col in JSON_COLUMNS and value is not None else value)
    return out


def fetch(con: Con, type_: type[S], sql: str, args: Sequence[Any] = ()) -> list[S]:
    """Run a query and convert every row to ``type_`` (columns are matched by name).

    Raises:
        msgspec.ValidationError: a row does not fit ``type_`` (a corrupt or foreign row).
    """
    cur = con.execute(sql, args)
    names = [d[0] for d in cur.description or ()]
    json_names = [n for n in names if n in JSON_COLUMNS]
    records = []
    for row in cur.fetchall():
        rec = dict(zip(names, row, strict=True))
        for name in json_names:
            rec[name] = from_json(rec[name])
        records.append(rec)
    return msgspec.convert(records, list[type_])


def first(con: Con, type_: type[S], sql: str, args: Sequence[Any] = ()) -> S | None:
    rows = fetch(con, type_, sql, args)
    return rows[0] if rows else None


def scalar(con: Con, sql: str, args: Sequence[Any] = ()) -> Any:
    """The first column of the first row; for UPDATE and DELETE, the number of rows hit."""
    row = con.execute(sql, args).fetchone()
    return None if row is None else row[0]


def transaction(con: Con, fn: Callable[[Con], T]) -> T:
    """Run ``fn(con)`` in one transaction: committed if it returns, rolled back if it raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        result = fn(con)
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return result


def invocation_columns(rows: Sequence[tuple[Any, ...] | msgspec.Struct]) -> list[list[Any]]:
    """Transpose invocation events into one list per column, ``detail`` JSON-encoded.

    Raises:
        ValueError: a tuple does not have one value per column.
    """
    columns: list[list[Any]] = [[] for _ in INVOCATION_EVENT_COLUMNS]
    for row in rows:
        if isinstance(row, msgspec.Struct):
            values: tuple[Any, ...] = tuple(getattr(row, c) for c in INVOCATION_EVENT_COLUMNS)
        else:
            values = row
        if len(values) != len(columns):
            raise ValueError(f"invocation event rows have {len(columns)} values, got {values!r}")
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    columns[-1] = [None if d is None else to_json(d) for d in columns[-1]]
    return columns
