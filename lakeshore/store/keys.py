"""Durable idempotency keys: which invocation a key named, and what its body was.

A queue's actor is their only writer (admission is its own). A key is kept for the
server's ``idempotency_ttl_s``; an expired key is as good as absent and is replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import duckdb

from lakeshore.store import _rows
from lakeshore.store.port import StoredKey

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")

_GET = """SELECT key, invocation_id, digest FROM idempotency_keys
    WHERE namespace = ? AND queue = ? AND created_at >= ? AND key IN (SELECT unnest(?))"""
_PUT = """INSERT OR REPLACE INTO idempotency_keys
    (namespace, queue, key, invocation_id, digest, created_at) VALUES (?, ?, ?, ?, ?, ?)"""
_RECORDED = """SELECT DISTINCT invocation_id FROM invocation_events
    WHERE namespace = ? AND invocation_id IN (SELECT unnest(?))"""


class KeyQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

    async def get_keys(
        self, namespace: str, queue: str, keys: Sequence[str], since: datetime
    ) -> dict[str, StoredKey]:
        """The keys of ``queue`` stored at or after ``since``, by key."""
        params = [namespace, queue, since, list(keys)]

        def work(con: Con) -> dict[str, StoredKey]:
            rows = con.execute(_GET, params).fetchall()
            return {k: StoredKey(invocation_id=i, digest=d) for k, i, d in rows}

        return await self._run(work)

    async def put_keys(
        self, namespace: str, queue: str, keys: dict[str, StoredKey], at: datetime
    ) -> None:
        """Store keys (replacing expired ones of the same name), atomically."""
        rows = [[namespace, queue, k, v.invocation_id, v.digest, at] for k, v in keys.items()]
        if not rows:
            return

        await self._run(lambda con: _rows.transaction(con, lambda c: c.executemany(_PUT, rows)))

    async def forget_keys(
        self, namespace: str, queue: str, keys: Sequence[str] | None = None
    ) -> None:
        """Forget ``keys`` of a queue (``None``: all, the queue is being deleted)."""
        sql = "DELETE FROM idempotency_keys WHERE namespace = ? AND queue = ?"
        params: list[object] = [namespace, queue]
        if keys is not None:
            sql += " AND key IN (SELECT unnest(?))"
            params.append(list(keys))
        await self._run(lambda con: con.execute(sql, params))

    async def prune_keys(self, before: datetime) -> int:
        """Forget keys stored before ``before``; how many were."""
        sql = "DELETE FROM idempotency_keys WHERE created_at < ? RETURNING 1"
        return await self._run(lambda con: len(con.execute(sql, [before]).fetchall()))

    async def recorded_ids(self, namespace: str, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` have any recorded event (the Recorder has seen them)."""
        rows = await self._run(
            lambda con: con.execute(_RECORDED, [namespace, list(ids)]).fetchall()
        )
        return {r[0] for r in rows}
