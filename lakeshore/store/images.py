"""Row images: what the state log carries, and how a replica applies them to its file.

Every change of a row the control plane owns (a namespace, token, queue, worker, provider,
queue event or idempotency key) is one :class:`Image`: the table, the row's key, and the
whole row as it is after the change, or ``None`` when the row is gone (a tombstone). The
leader publishes images to the replicated state stream before it answers; every replica,
the leader included, applies them to its own DuckDB through :func:`apply`, in stream order,
together with the stream sequence they came from, in one transaction. Applying an image
is idempotent (delete the key, insert the row), so a replica can be rebuilt from the
stream alone, and a row image is all a compacted stream keeps per key.

Invocation history is not here: it is the projection of the events stream (the Recorder's).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import duckdb

from lakeshore.model.images import Image

Con = duckdb.DuckDBPyConnection
log = logging.getLogger(__name__)


class Table(NamedTuple):
    """A table whose rows the state log carries."""

    name: str
    #: the columns that identify a row
    key: tuple[str, ...]
    #: other columns unique together (a row's later image may free a value a batch reuses)
    unique: tuple[tuple[str, ...], ...] = ()


#: The logged tables, by the short name their images and subjects use.
TABLES: dict[str, Table] = {
    "ns": Table("namespaces", ("name",)),
    "token": Table("tokens", ("id",), unique=(("hash",),)),
    "queue": Table("queues", ("namespace", "name")),
    "worker": Table("workers", ("id",), unique=(("namespace", "name"),)),
    "provider": Table("providers", ("namespace", "name")),
    "qevent": Table("queue_events", ("id",)),
    "idem": Table("idempotency_keys", ("namespace", "queue", "key")),
}

#: The log position row of the state stream in ``log_positions``.
STATE_LOG = "state"
#: The log position row of the events stream (the Recorder's) in ``log_positions``.
EVENTS_LOG = "events"


def of_row(kind: str, row: dict[str, Any]) -> Image:
    """The image of ``row`` (a complete ``{column: value}`` of table ``kind``)."""
    return Image(kind, tuple(row[c] for c in TABLES[kind].key), row)


def tombstone(kind: str, *key: str | int | None) -> Image:
    return Image(kind, tuple(key), None)


def read_rows(con: Con, kind: str, where: str = "", params: Sequence[Any] = ()) -> list[dict]:
    """Rows of ``kind``'s table as ``{column: value}`` (for images of changed rows)."""
    cur = con.execute(f"SELECT * FROM {TABLES[kind].name} {where}", params)
    names = [d[0] for d in cur.description or ()]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def position(con: Con, log: str) -> int | None:
    """The last sequence of ``log`` applied to this file (``None``: never recorded)."""
    row = con.execute("SELECT seq FROM log_positions WHERE log = ?", [log]).fetchone()
    return None if row is None else int(row[0])


def set_position(con: Con, log: str, seq: int) -> None:
    # An UPDATE costs a third of an INSERT OR REPLACE, and the row exists but once.
    if not con.execute("UPDATE log_positions SET seq = ? WHERE log = ?", [seq, log]).fetchone()[0]:
        con.execute("INSERT INTO log_positions (log, seq) VALUES (?, ?)", [log, seq])


def apply(con: Con, images: Sequence[Image], seq: int | None) -> set[str]:
    """Apply ``images`` in order (the last image of a key wins) and record ``seq`` as the
    state log's position, in the caller's transaction; returns the kinds touched."""
    latest: dict[tuple[str, tuple[Any, ...]], Image] = {}
    for image in images:
        if image.kind not in TABLES:
            log.warning("skipping a row image of unknown kind %r (a newer version's?)", image.kind)
            continue
        latest.pop((image.kind, image.key), None)
        latest[(image.kind, image.key)] = image
    by_kind: dict[str, list[Image]] = {}
    for image in latest.values():
        by_kind.setdefault(image.kind, []).append(image)
    for kind, group in by_kind.items():
        if len(group) >= _BULK:
            _replace(con, TABLES[kind], group)
        else:
            for image in group:
                _replace_one(con, TABLES[kind], image)
    if seq is not None:
        set_position(con, STATE_LOG, seq)
    return set(by_kind)


#: From this many images of one table in a batch, one statement per step for them all.
_BULK = 16


def _replace_one(con: Con, table: Table, image: Image) -> None:
    """One image, in the fewest statements: an UPDATE when the row is there with the same
    key and unique values (the common case: a worker's liveness, a queue's patch)."""
    types = _types(con, table.name)
    fixed = [*table.key, *(c for cols in table.unique for c in cols)]
    row = image.row
    if row is not None:
        sets = [c for c in row if c in types and c not in fixed]
        if sets:
            sql = (
                f"UPDATE {table.name} SET {', '.join(f'{c} = ?' for c in sets)} "
                f"WHERE {' AND '.join(f'{c} = ?' for c in fixed)}"
            )
            if con.execute(sql, [*(row[c] for c in sets), *(row[c] for c in fixed)]).fetchone()[0]:
                return
    where = " AND ".join(f"{k} = ?" for k in table.key)
    con.execute(f"DELETE FROM {table.name} WHERE {where}", list(image.key))
    if row is None:
        return
    for columns in table.unique:  # see _replace
        where = " AND ".join(f"{c} = ?" for c in columns)
        con.execute(f"DELETE FROM {table.name} WHERE {where}", [row[c] for c in columns])
    cols = [c for c in row if c in types]
    values = ", ".join("?" * len(cols))
    con.execute(
        f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({values})", [row[c] for c in cols]
    )


def _replace(con: Con, table: Table, images: list[Image]) -> None:
    types = _types(con, table.name)
    keys = [[i.key[n] for i in images] for n in range(len(table.key))]
    _delete_matching(con, table.name, types, table.key, keys)
    rows = [i.row for i in images if i.row is not None]
    # A compacted stream may bring a row before the later image of another row that gave up
    # one of its unique values (a worker's name): that other row is stale here, and its own
    # later image comes in this batch or a next one.
    for columns in table.unique:
        values = [[r[c] for r in rows] for c in columns]
        _delete_matching(con, table.name, types, columns, values)
    # Rows written by one version have one set of columns; group in case of a mix.
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        by_columns.setdefault(tuple(row), []).append(row)
    for columns, group in by_columns.items():
        cols = [c for c in columns if c in types]
        values = ", ".join(f"unnest(?::{types[c]}[])" for c in cols)
        con.execute(
            f"INSERT INTO {table.name} ({', '.join(cols)}) SELECT {values}",
            [[r[c] for r in group] for c in cols],
        )


def _delete_matching(
    con: Con, table: str, types: dict[str, str], columns: Sequence[str], values: list[list[Any]]
) -> None:
    """Delete the rows whose ``columns`` equal one of the tuples ``values`` hold in step."""
    if not values or not values[0]:
        return
    using = ", ".join(f"unnest(?::{types[c]}[]) AS {c}" for c in columns)
    match = " AND ".join(f"{table}.{c} = v.{c}" for c in columns)
    con.execute(f"DELETE FROM {table} USING (SELECT {using}) v WHERE {match}", values)


_TYPES: dict[str, dict[str, str]] = {}


def _types(con: Con, table: str) -> dict[str, str]:
    """``{column: SQL type}`` of ``table`` (the schema is fixed for a running version)."""
    if table not in _TYPES:
        rows = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
        _TYPES[table] = {name: kind for name, kind in rows}
    return _TYPES[table]


def all_images(con: Con) -> list[Image]:
    """Every logged row as an image (to seed an empty state stream from this file)."""
    return [of_row(kind, row) for kind in TABLES for row in read_rows(con, kind)]
