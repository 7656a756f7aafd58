"""The DuckDB row store (the :mod:`lakeshore.store.port` ports) over one file.

The project's SQL lives in this package only: the rows' statements here, the history's in
:mod:`.jobs` and :mod:`.fences`, the providers' in :mod:`.providers`, the schema in
:mod:`.migrations`.

DuckDB's Python API is synchronous and a database file has one writer, so a :class:`Store`
owns one connection that lives on one dedicated thread. Every public method is a coroutine
that runs its work on that thread; calls are therefore serialised in the order they were
made, and the event loop never blocks on the file. Values always travel as parameters.

Rows come back as the Structs of :mod:`lakeshore.model` through the one generic
conversion of :mod:`lakeshore.store._rows`. Timestamps are ``TIMESTAMPTZ`` and come back
tz-aware in UTC; elasticity, labels, worker queues and event details are JSON in VARCHAR.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import duckdb
import msgspec

from lakeshore import errors
from lakeshore.model import Namespace, Queue, QueueEvent, QueueState, Token, Worker, now
from lakeshore.model.providers import Provider
from lakeshore.store import _rows, images
from lakeshore.store import migrations as mig
from lakeshore.store import providers as prov
from lakeshore.store.backup import BackupQueries
from lakeshore.store.history import HistoryQueries
from lakeshore.store.images import Image
from lakeshore.store.jobs import JobQueries
from lakeshore.store.keys import KeyQueries
from lakeshore.store.ranks import Ranks
from lakeshore.store.reads import LANES, FairReads
from lakeshore.store.registry import RegistryQueries
from lakeshore.store.writes import WriteBatches

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")

_NAMESPACE = ("name", "org", "created_at")
_TOKEN = ("id", "namespace", "description", "admin", "created_at")
_QUEUE = ("namespace", "name", "kind", "state", "description", "max_depth", "on_full",
          "elasticity", "created_at", "updated_at", "labels", "code", "defaults")  # fmt: skip
_WORKER = ("id", "namespace", "name", "queues", "labels", "provider", "managed", "status",
           "current", "last_heartbeat", "started_at", "placement", "resources",
           "running", "launched_with")  # fmt: skip
_QUEUE_EVENT = ("id", "namespace", "queue", "ts", "type", "actor", "detail")

_SELECT_NAMESPACE = _rows.select("namespaces", _NAMESPACE)
_SELECT_TOKEN = _rows.select("tokens", _TOKEN) + " WHERE revoked_at IS NULL"
_SELECT_QUEUE = _rows.select("queues", _QUEUE)
_SELECT_WORKER = _rows.select("workers", _WORKER)


def _row(obj: msgspec.Struct, cols: Sequence[str]) -> dict[str, Any]:
    """``{column: value}`` of ``obj`` as stored (JSON columns encoded)."""
    return dict(zip(cols, _rows.params(obj, cols), strict=True))


class Store(WriteBatches, JobQueries, KeyQueries, RegistryQueries, HistoryQueries, BackupQueries):
    """The row store. Build it with :func:`open_store`; close it with :meth:`close`.

    A write of a logged row is a plan (checked against the rows, turned into
    :class:`~lakeshore.model.images.Image` s) that goes in a batch to the log set by
    :meth:`write_through` — the control plane's state stream — before it is committed
    (:mod:`lakeshore.store.writes`). The job and history queries are in
    :mod:`lakeshore.store.jobs`.
    """

    def __init__(
        self, con: Con, executor: ThreadPoolExecutor, reads: FairReads | None = None
    ) -> None:
        self._con = con
        self._executor = executor
        self._closed = False
        #: the tenants' reads (``None``: they run on the store's thread too)
        self._reads = reads
        #: namespace -> org, for the turns of the tenants' reads (a namespace never moves)
        self._orgs: dict[str, str] = {}
        #: the pending backlogs' ranks, kept between changes of history
        self._ranks = Ranks()
        # Every queue row, as all_queues last read them; None once a queue write may have
        # changed them. Touched on the store's thread only (inside ``_run``'s functions).
        self._queue_rows: list[Queue] | None = None
        self._init_writes(con)
        #: Nats-TTL of idempotency key images (seconds; ``None``: kept until deleted)
        self.key_ttl_s: int | None = None

    async def _run(self, fn: Callable[[Con], T]) -> T:
        if self._closed:
            raise errors.Unavailable("the store is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, self._con)
        except (duckdb.IOException, duckdb.TransactionException) as e:
            # A full or failing disk is the deployment's state, not a bug of the caller: a
            # refusal with the reason (the actor asking is not restarted for it).
            if "No space left" in str(e):
                raise errors.StoreFull(str(e)) from e
            raise errors.Unavailable(f"the store could not write: {e}") from e

    async def _read(self, namespace: str, fn: Callable[[Con], T]) -> T:
        """A read of ``namespace``'s history that a tenant asked for: in its org's turn, on
        a cursor of its own (see :mod:`lakeshore.store.reads`)."""
        if self._reads is None:
            return await self._run(fn)
        if self._closed:
            raise errors.Unavailable("the store is closed")
        org = self._orgs.get(namespace)
        if org is None:
            row = await self.get_namespace(namespace)
            # A namespace without a row has no history; its reads take a turn of their own.
            org = row.org if row is not None else f"namespace {namespace}"
            if row is not None:
                self._orgs[namespace] = org
        return await self._reads.run(org, fn)

    async def close(self) -> None:
        """Close the connection after the calls already made, then stop the thread.

        Idempotent. Calls made after ``close`` raise :class:`errors.Unavailable`.
        """
        if self._closed:
            return
        await self.close_writes()
        self._closed = True
        if self._reads is not None:
            await self._reads.close()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._con.close)
        finally:
            # Not joined here: a close cut short (cancelled) may leave the thread in a
            # batch that waits for this loop to log it; it ends on its own, the close
            # queued after it included.
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def schema_version(self) -> int:
        """The highest migration applied to the file."""
        return await self._run(mig.schema_version)

    # ---- namespaces -----------------------------------------------------------------

    async def insert_namespace(self, ns: Namespace) -> None:
        """Add a namespace.

        Raises:
            errors.AlreadyExists: a namespace with that name exists.
        """

        def plan(con: Con) -> tuple[list[Image], None]:
            if _rows.scalar(con, "SELECT 1 FROM namespaces WHERE name = ?", [ns.name]):
                raise errors.AlreadyExists("namespace", ns.name, "")
            return [images.of_row("ns", _row(ns, _NAMESPACE))], None

        await self._write(plan)

    async def get_namespace(self, name: str) -> Namespace | None:
        sql = _SELECT_NAMESPACE + " WHERE name = ?"
        return await self._run(lambda con: _rows.first(con, Namespace, sql, [name]))

    async def list_namespaces(self, org: str | None = None) -> list[Namespace]:
        """Every namespace, or those of ``org``, sorted by name."""
        sql = _SELECT_NAMESPACE + " WHERE org = coalesce(?, org) ORDER BY name"
        return await self._run(lambda con: _rows.fetch(con, Namespace, sql, [org]))

    # ---- tokens ---------------------------------------------------------------------

    async def insert_token(self, token: Token, token_hash: str) -> None:
        """Store a token with the hash of its secret (the secret itself is never stored).

        Raises:
            errors.AlreadyExists: the id, or the hash, is already taken (revoked or not).
        """

        def plan(con: Con) -> tuple[list[Image], None]:
            sql = "SELECT 1 FROM tokens WHERE id = ? OR hash = ?"
            if _rows.scalar(con, sql, [token.id, token_hash]):
                raise errors.AlreadyExists("token", token.id, " (or its secret is reused)")
            row = {**_row(token, _TOKEN), "hash": token_hash, "revoked_at": None}
            return [images.of_row("token", row)], None

        await self._write(plan)

    async def token_by_hash(self, token_hash: str) -> Token | None:
        """The live (not revoked) token whose secret hashes to ``token_hash``."""
        sql = _SELECT_TOKEN + " AND hash = ?"
        return await self._run(lambda con: _rows.first(con, Token, sql, [token_hash]))

    async def token_by_id(self, token_id: str) -> Token | None:
        """The live (not revoked) token ``token_id``."""
        sql = _SELECT_TOKEN + " AND id = ?"
        return await self._run(lambda con: _rows.first(con, Token, sql, [token_id]))

    async def list_tokens(self, namespace: str | None) -> list[Token]:
        """Live tokens of ``namespace`` (``None``: the admin tokens), oldest first."""
        sql = _SELECT_TOKEN + " AND namespace IS NOT DISTINCT FROM ? ORDER BY created_at, id"
        return await self._run(lambda con: _rows.fetch(con, Token, sql, [namespace]))

    async def revoke_token(
        self, namespace: str | None, token_id: str, at: datetime | None = None
    ) -> Token | None:
        """Mark a live token of ``namespace`` revoked at ``at`` (default: now).

        Returns:
            The revoked token, or ``None`` when ``namespace`` has no live token ``token_id``.
        """
        where = "WHERE id = ? AND revoked_at IS NULL AND namespace IS NOT DISTINCT FROM ?"

        def plan(con: Con) -> tuple[list[Image], Token | None]:
            rows = images.read_rows(con, "token", where, [token_id, namespace])
            if not rows:
                return [], None
            row = {**rows[0], "revoked_at": now() if at is None else at}
            token = msgspec.convert({c: row[c] for c in _TOKEN}, Token)
            return [images.of_row("token", row)], token

        return await self._write(plan)

    # ---- queues ---------------------------------------------------------------------

    async def insert_queue(self, q: Queue) -> None:
        """Add a queue row.

        Raises:
            errors.AlreadyExists: the namespace has a queue of that name.
        """

        def plan(con: Con) -> tuple[list[Image], None]:
            sql = "SELECT 1 FROM queues WHERE namespace = ? AND name = ?"
            if _rows.scalar(con, sql, [q.namespace, q.name]):
                raise errors.AlreadyExists("queue", q.name, f" in namespace {q.namespace!r}")
            return [images.of_row("queue", _row(q, _QUEUE))], None

        await self._write(plan)

    async def update_queue(self, q: Queue) -> None:
        """Overwrite every column of the queue ``(q.namespace, q.name)`` but its key.

        Raises:
            errors.QueueNotFound: there is no such queue.
        """

        def plan(con: Con) -> tuple[list[Image], None]:
            sql = "SELECT 1 FROM queues WHERE namespace = ? AND name = ?"
            if not _rows.scalar(con, sql, [q.namespace, q.name]):
                raise errors.QueueNotFound(q.namespace, q.name)
            return [images.of_row("queue", _row(q, _QUEUE))], None

        await self._write(plan)

    async def delete_queue(self, namespace: str, name: str) -> bool:
        """Delete the queue row (its events are kept). Returns whether it existed."""
        sql = "SELECT 1 FROM queues WHERE namespace = ? AND name = ?"

        def plan(con: Con) -> tuple[list[Image], bool]:
            if not _rows.scalar(con, sql, [namespace, name]):
                return [], False
            return [images.tombstone("queue", namespace, name)], True

        return await self._write(plan)

    async def get_queue(self, namespace: str, name: str) -> Queue | None:
        sql = _SELECT_QUEUE + " WHERE namespace = ? AND name = ?"
        return await self._run(lambda con: _rows.first(con, Queue, sql, [namespace, name]))

    async def list_queues(
        self,
        namespaces: list[str],
        state: QueueState | None = None,
        *,
        limit: int | None = None,
        after: tuple[str, str] | None = None,
    ) -> list[Queue]:
        """Queues of any of ``namespaces`` (in ``state`` if given), by namespace then name.

        Args:
            limit: at most this many (``None``: all).
            after: only queues after this ``(namespace, name)`` in that order (the last
                row of the previous page), whether or not it still exists.
        """
        sql = _SELECT_QUEUE + " WHERE namespace = ANY(?::VARCHAR[]) AND state = coalesce(?, state)"
        params: list[Any] = [namespaces, state]
        if after is not None:
            sql += " AND (namespace > ? OR (namespace = ? AND name > ?))"
            params += [after[0], after[0], after[1]]
        sql += " ORDER BY namespace, name"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return await self._run(lambda con: _rows.fetch(con, Queue, sql, params))

    async def all_queues(self) -> list[Queue]:
        """Every queue of every namespace and state, by namespace then name.

        Read from the file again only after a queue was inserted, updated or deleted (the
        controller asks every tick; converting 10,000 rows takes 100 ms of the store's
        thread). The rows are frozen and shared between callers: never mutate their dicts.
        """
        sql = _SELECT_QUEUE + " ORDER BY namespace, name"

        def work(con: Con) -> list[Queue]:
            if self._queue_rows is None:
                self._queue_rows = _rows.fetch(con, Queue, sql)
            return list(self._queue_rows)

        return await self._run(work)

    # ---- workers --------------------------------------------------------------------

    async def upsert_worker(self, w: Worker) -> None:
        """Insert the worker, or overwrite the row with the same id (a rename included).

        The upserts queued together (a fleet registering at once) are checked and written
        in a few statements for all (:func:`_upsert_workers`).

        Raises:
            errors.AlreadyExists: another worker id has the same (namespace, name).
        """
        await self._write_merged("worker", w, _upsert_workers)

    async def get_worker(self, namespace: str, ref: str) -> Worker | None:
        """The worker of ``namespace`` whose id, else whose name, is ``ref``."""
        sql = (
            _SELECT_WORKER + " WHERE namespace = ? AND (id = ? OR name = ?)"
            " ORDER BY id = ? DESC LIMIT 1"
        )
        return await self._read(
            namespace, lambda con: _rows.first(con, Worker, sql, [namespace, ref, ref, ref])
        )

    async def list_workers(self, namespace: str | None = None) -> list[Worker]:
        """Workers of ``namespace`` (``None``: all, for the registry's start), by namespace
        then name; a namespace's are a tenant's read (in its org's turn)."""
        sql = _SELECT_WORKER + " WHERE namespace = coalesce(?, namespace) ORDER BY namespace, name"
        if namespace is None:
            return await self._run(lambda con: _rows.fetch(con, Worker, sql, [namespace]))
        return await self._read(namespace, lambda con: _rows.fetch(con, Worker, sql, [namespace]))

    async def delete_worker(self, id: str) -> bool:
        """Returns whether a worker with that id existed."""

        def plan(con: Con) -> tuple[list[Image], bool]:
            if not _rows.scalar(con, "SELECT 1 FROM workers WHERE id = ?", [id]):
                return [], False
            return [images.tombstone("worker", id)], True

        return await self._write(plan)

    async def scrub_queue_from_workers(self, namespace: str, queue: str) -> list[Worker]:
        """Remove ``queue`` from the ``queues`` of every worker of ``namespace``, atomically.

        A worker left with no queue is back on the default queue (``queues == []``).

        Returns:
            The changed workers as they are now, by name.
        """

        def plan(con: Con) -> tuple[list[Image], list[Worker]]:
            # A validated name's JSON string matches only a whole list element; the exact
            # test below is authoritative, the filter only narrows the scan.
            sql = _SELECT_WORKER + " WHERE namespace = ? AND contains(queues, ?) ORDER BY name"
            changed = [
                msgspec.structs.replace(w, queues=[q for q in w.queues if q != queue])
                for w in _rows.fetch(con, Worker, sql, [namespace, _rows.to_json(queue)])
                if queue in w.queues
            ]
            return [images.of_row("worker", _row(w, _WORKER)) for w in changed], changed

        return await self._write(plan)

    # ---- queue events ---------------------------------------------------------------

    async def append_queue_event(
        self,
        namespace: str,
        queue: str,
        type: str,
        actor: str | None,
        detail: dict[str, Any] | None,
        ts: datetime | None = None,
    ) -> QueueEvent:
        """Record a change of a queue at ``ts`` (default: now).

        Returns:
            The stored event, with its id (increasing in append order) and its detail.
        """
        encoded = None if detail is None else _rows.to_json(detail)

        def plan(con: Con) -> tuple[list[Image], QueueEvent]:
            # The one writer numbers the events (under the write lock, after every earlier
            # event is applied), so every replica has the same ids.
            id = _rows.scalar(con, "SELECT coalesce(max(id), 0) + 1 FROM queue_events")
            at = now() if ts is None else ts
            at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
            values = [id, namespace, queue, at, type, actor, encoded]
            row = dict(zip(_QUEUE_EVENT, values, strict=True))
            event = QueueEvent(**{**row, "detail": _rows.from_json(encoded)})
            return [images.of_row("qevent", row)], event

        return await self._write(plan)

    async def list_queue_events(
        self,
        namespace: str,
        queue: str,
        limit: int = 50,
        verbose: bool = False,
        since: datetime | None = None,
    ) -> list[QueueEvent]:
        """The ``limit`` newest events of a queue, newest first.

        Args:
            limit: at most this many events (>= 0).
            verbose: fill ``detail``; otherwise it is ``None``.
            since: only events at or after this time (a naive one is taken as UTC), e.g. a
                queue row's ``created_at``, so a re-created queue does not show the history
                of the removed queue of the same name.

        Raises:
            errors.Invalid: ``limit`` is negative.
        """
        if limit < 0:
            raise errors.Invalid(f"limit must be 0 or more, got {limit}")
        cols = _QUEUE_EVENT if verbose else _QUEUE_EVENT[:-1]
        where, params = "namespace = ? AND queue = ?", [namespace, queue]
        if since is not None:
            # A naive value binds as TIMESTAMP, cast in the session's time zone: UTC.
            where += " AND ts >= ?"
            params.append(since)
        sql = _rows.select("queue_events", cols) + f" WHERE {where} ORDER BY id DESC LIMIT ?"
        return await self._read(
            namespace, lambda con: _rows.fetch(con, QueueEvent, sql, [*params, limit])
        )

    # ---- invocation events and jobs: see lakeshore.store.jobs (mixed in) ------------

    # ---- providers (SQL in lakeshore.store.providers) ----------------------------------

    async def insert_provider(self, p: Provider) -> None:
        """Add a provider row.

        Raises:
            errors.AlreadyExists: the namespace has a provider of that name.
        """
        await self._write(lambda con: ([images.of_row("provider", prov.insert(con, p))], None))

    async def get_provider(self, namespace: str, name: str) -> Provider | None:
        return await self._run(lambda con: prov.get(con, namespace, name))

    async def update_provider(self, p: Provider) -> None:
        """Replace a provider row's config and labels."""
        await self._write(lambda con: ([images.of_row("provider", prov.update(con, p))], None))

    async def list_providers(self, namespace: str) -> list[Provider]:
        """The namespace's stored providers, by name (the built-in ``local`` is not stored)."""
        return await self._run(lambda con: prov.list_(con, namespace))

    async def delete_provider(self, namespace: str, name: str) -> Provider | None:
        """Delete a provider row; returns it as it was, or ``None`` if there was none."""

        def plan(con: Con) -> tuple[list[Image], Provider | None]:
            gone = prov.get(con, namespace, name)
            return ([] if gone is None else [images.tombstone("provider", namespace, name)]), gone

        return await self._write(plan)


def _connect(path: Path, migrations: Sequence[mig.Migration]) -> Con:
    path.parent.mkdir(parents=True, exist_ok=True)
    # DuckDB replays a write-ahead log that ends in a torn entry up to the tear and drops
    # the rest without a word: committed rows would be missing. A SIGKILL never tears one
    # (each entry is written whole), so a torn log is damage: refuse it, and say how to go
    # on. (A log cut exactly between two entries cannot be told from a shorter one.)
    import struct

    wal = path.with_name(path.name + ".wal")
    data = wal.read_bytes() if wal.exists() else b""
    pos, known = 0, bool(data)

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    try:  # the version entry: fields (u16 id, varints) up to 0xFFFF; only version 2 (size
        # and checksum before each entry) is judged here, any other format by DuckDB alone
        while known and (field := struct.unpack_from("<H", data, pos)[0]) != 0xFFFF:
            pos += 2
            if field not in (100, 101, 102, 103):
                known = False
            values = [varint() for _ in range(varint() if field == 102 else 1)]
            if field == 101 and values != [2]:
                known = False
        pos += 2
        while known and pos < len(data):  # entries: u64 size, u64 checksum, payload
            size = struct.unpack_from("<Q", data, pos)[0]
            if size > len(data) - pos - 16:
                break
            pos += 16 + size
    except (IndexError, struct.error):
        pass
    if known and pos != len(data):
        raise errors.Unavailable(
            f"cannot open store {str(path)!r}: its write-ahead log {str(wal)!r} is torn "
            f"(damaged or truncated: {len(data):,} bytes, the entries end unreadably at byte "
            f"{pos:,}), so rows it holds would be missing; restore the data dir from a backup, "
            f"or accept losing what follows the tear with `truncate -s {pos} {wal}`"
        )
    con = duckdb.connect(str(path))
    try:
        con.execute("SET TimeZone = 'UTC'")
        mig.migrate(con, str(path), migrations)
    except BaseException:
        con.close()
        raise
    return con


async def open_store(path: Path, *, migrations: Sequence[mig.Migration] = mig.MIGRATIONS) -> Store:
    """Open (creating it and its parent directory if needed) and migrate a store file.

    Args:
        path: the DuckDB file.
        migrations: the known migrations; only tests pass anything but the default.

    Raises:
        SchemaTooNew: the file was written by a newer Lakeshore.
        errors.Unavailable: the file cannot be opened (e.g. another process holds it), or
            its write-ahead log is torn or damaged (starting would lose committed rows).
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakeshore-store")
    loop = asyncio.get_running_loop()
    try:
        con = await loop.run_in_executor(executor, _connect, Path(path), migrations)
    except duckdb.IOException as exc:
        executor.shutdown(wait=False, cancel_futures=True)
        if "Could not set lock" in str(exc):
            raise errors.Unavailable(
                f"the store {str(path)!r} is in use by another process (is another "
                f"`lakeshore server` running on this data dir?): {exc}"
            ) from exc
        raise errors.Unavailable(f"cannot open store {str(path)!r}: {exc}") from exc
    except duckdb.Error as exc:
        executor.shutdown(wait=False, cancel_futures=True)
        if "WAL" not in str(exc):
            raise
        # A damaged log (a checksum mismatch): DuckDB refuses it; say so without a traceback.
        raise errors.Unavailable(
            f"cannot open store {str(path)!r}: its write-ahead log is damaged ({exc}); "
            "restore the data dir from a backup"
        ) from exc
    except BaseException:
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    cursors = await loop.run_in_executor(executor, _cursors, con, LANES)
    return Store(con, executor, FairReads.open(cursors))


def _cursors(con: Con, count: int) -> list[Con]:
    """Cursors on ``con``'s file for the tenants' reads (made on the store's thread)."""
    out = [con.cursor() for _ in range(count)]
    for cursor in out:
        cursor.execute("SET TimeZone = 'UTC'")
    return out


def _upsert_workers(con: Con, ws: list[Worker]) -> tuple[list[Image], list[Any]]:
    """The plan of :meth:`Store.upsert_worker` for several workers: one query finds the
    names another id holds; a later worker of the list wins over an earlier one of the
    same id, and is refused if an earlier one of another id took its name."""
    sql = (
        "SELECT v.i, w.id FROM workers w JOIN (SELECT unnest(?::VARCHAR[]) AS namespace, "
        "unnest(?::VARCHAR[]) AS name, unnest(?::VARCHAR[]) AS id, unnest(?::INTEGER[]) AS i) "
        "v ON w.namespace = v.namespace AND w.name = v.name AND w.id <> v.id"
    )
    params = [[w.namespace for w in ws], [w.name for w in ws], [w.id for w in ws]]
    taken = dict(con.execute(sql, [*params, list(range(len(ws)))]).fetchall())
    named: dict[tuple[str, str], str] = {}  # (namespace, name) -> id, as the list goes
    name_of: dict[str, tuple[str, str]] = {}  # the other way: the ids taken so far
    changes: list[Image] = []
    outcomes: list[Any] = []
    for i, w in enumerate(ws):
        holder = named.get((w.namespace, w.name))
        other = holder if holder is not None and holder != w.id else None
        # A name the file gives another id is free if that id moved earlier in the list.
        if holder is None and i in taken and taken[i] not in name_of:
            other = taken[i]
        if other is not None:
            outcomes.append(errors.AlreadyExists(
                "worker", w.name, f" in namespace {w.namespace!r} with id {other!r}"
            ))  # fmt: skip
            continue
        if (given_up := name_of.get(w.id)) is not None:  # this id's earlier name in the list
            del named[given_up]
        named[(w.namespace, w.name)] = w.id
        name_of[w.id] = (w.namespace, w.name)
        changes.append(images.of_row("worker", _row(w, _WORKER)))
        outcomes.append(None)
    return changes, outcomes
