"""Durable idempotency keys: which invocation a key named, and what its body was.

A queue's actor is their only writer (admission is its own). A key is kept for the
server's ``idempotency_ttl_s``; an expired key is as good as absent and is replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import duckdb

from lakeshore.store import images
from lakeshore.store.images import Image
from lakeshore.store.port import StoredKey

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")

_GET = """SELECT key, invocation_id, digest FROM idempotency_keys
    WHERE namespace = ? AND queue = ? AND created_at >= ? AND key IN (SELECT unnest(?))"""
_KEY_COLUMNS = ("namespace", "queue", "key", "invocation_id", "digest", "created_at")
_RECORDED = """SELECT DISTINCT invocation_id FROM invocation_events
    WHERE namespace = ? AND invocation_id IN (SELECT unnest(?))"""


class KeyQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

        async def _write(self, plan: Callable[[Con], tuple[list[Image], T]]) -> T: ...

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
        """Store keys (replacing expired ones of the same name)."""
        rows = [
            dict(
                zip(_KEY_COLUMNS, (namespace, queue, k, v.invocation_id, v.digest, at), strict=True)
            )
            for k, v in keys.items()
        ]
        if rows:
            await self._write(lambda con: ([images.of_row("idem", r) for r in rows], None))

    async def forget_keys(
        self, namespace: str, queue: str, keys: Sequence[str] | None = None
    ) -> None:
        """Forget ``keys`` of a queue (``None``: all, the queue is being deleted)."""
        sql = "SELECT key FROM idempotency_keys WHERE namespace = ? AND queue = ?"
        params: list[object] = [namespace, queue]
        if keys is not None:
            sql += " AND key IN (SELECT unnest(?))"
            params.append(list(keys))

        def plan(con: Con) -> tuple[list[Image], None]:
            found = [r[0] for r in con.execute(sql, params).fetchall()]
            return [images.tombstone("idem", namespace, queue, k) for k in found], None

        await self._write(plan)

    async def prune_keys(self, before: datetime) -> int:
        """Forget keys stored before ``before``; how many were.

        This file only: the state log expires each key's image by itself (its TTL), so
        every replica prunes its own copy.
        """
        sql = "DELETE FROM idempotency_keys WHERE created_at < ? RETURNING 1"
        return await self._run(lambda con: len(con.execute(sql, [before]).fetchall()))

    async def recorded_ids(self, namespace: str, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` have any recorded event (the Recorder has seen them)."""
        rows = await self._run(
            lambda con: con.execute(_RECORDED, [namespace, list(ids)]).fetchall()
        )
        return {r[0] for r in rows}
