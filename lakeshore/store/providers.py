"""Provider rows: the SQL, run on the store's thread (see :class:`~lakeshore.store.Store`).

``config`` is free-form JSON kept in a VARCHAR. The built-in ``local`` provider of every
namespace is not a row; the layers above add it.
"""

from __future__ import annotations

from typing import Any

import duckdb
import msgspec

from lakeshore import errors
from lakeshore.model import Provider
from lakeshore.store import _rows, images

Con = duckdb.DuckDBPyConnection

_COLUMNS = ("namespace", "name", "kind", "config", "created_at", "labels")
_SELECT = _rows.select("providers", _COLUMNS)


def insert(con: Con, p: Provider) -> dict[str, Any]:
    """The row of a new provider (for its image).

    Raises:
        errors.AlreadyExists: the namespace has a provider of that name.
    """
    sql = "SELECT 1 FROM providers WHERE namespace = ? AND name = ?"
    if _rows.scalar(con, sql, [p.namespace, p.name]):
        raise errors.AlreadyExists("provider", p.name, f" in namespace {p.namespace!r}")
    return dict(zip(_COLUMNS, _values(p), strict=True))


def update(con: Con, p: Provider) -> dict[str, Any]:
    """The row with ``p``'s config and labels (its kind, name and creation kept).

    Raises:
        errors.NotFound: there is no such provider.
    """
    rows = images.read_rows(
        con, "provider", "WHERE namespace = ? AND name = ?", [p.namespace, p.name]
    )
    if not rows:
        raise errors.NotFound(f"no provider {p.name!r} in namespace {p.namespace!r}")
    return {**rows[0], "config": _rows.to_json(p.config), "labels": _rows.to_json(p.labels)}


def _values(p: Provider) -> list[Any]:
    return [p.namespace, p.name, p.kind, _rows.to_json(p.config), p.created_at,
            _rows.to_json(p.labels)]  # fmt: skip


def get(con: Con, namespace: str, name: str) -> Provider | None:
    rows = _fetch(con, _SELECT + " WHERE namespace = ? AND name = ?", [namespace, name])
    return rows[0] if rows else None


def list_(con: Con, namespace: str) -> list[Provider]:
    """The namespace's provider rows, by name."""
    return _fetch(con, _SELECT + " WHERE namespace = ? ORDER BY name", [namespace])


def _fetch(con: Con, sql: str, args: list[Any]) -> list[Provider]:
    cur = con.execute(sql, args)
    names = [d[0] for d in cur.description or ()]
    records = []
    for row in cur.fetchall():
        rec = dict(zip(names, row, strict=True))
        rec["config"] = _rows.from_json(rec["config"])
        rec["labels"] = _rows.from_json(rec["labels"]) or {}
        records.append(rec)
    return msgspec.convert(records, list[Provider])
