"""The in-memory twin of the row store, for fast actor tests (the dramatiq StubBroker idea).

:class:`InMemoryStore` implements every port of :mod:`lakeshore.store.port` with plain dicts
and lists, and behaves as :class:`lakeshore.store.duckdb.Store` does: the same errors with
the same messages, the same orderings, the same rename and conflict rules. Both run the
contract tests of ``tests/store/test_contract.py``; a behaviour they disagree on is a bug
of this module (or of the contract).

What the database does to a row is done here too, so a test cannot pass only in memory:

* every row is stored and returned as a fresh copy made by a JSON round trip, so a caller
  mutating a list it passed in or got back changes nothing stored, and an event's
  ``detail`` comes back as JSON would give it (tuples as lists, datetimes as strings);
* timestamp columns come back tz-aware in UTC (a naive one is taken as UTC);
* fences are derived from the accepted (not ``stale``) invocation events with the tables
  of :mod:`lakeshore.fencing`, as the SQL of :mod:`lakeshore.store.fences` is.

Not implemented, DuckDB-only: the job and history queries (``list_jobs``, ``get_job``,
``queue_activity``, ``list_invocation_events``), tokens and ``schema_version``. The store's
``insert_namespace`` is, so that tests can seed namespaces. No DuckDB is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

import msgspec
from msgspec.structs import replace

from lakeshore import errors
from lakeshore.fencing import (
    CLAIMING,
    RAISES_EPOCH,
    RANK,
    RANK_BASE,
    TERMINAL,
    Fence,
    Key,
    kept_claims,
)
from lakeshore.model import (
    EventType,
    InvocationEvent,
    Namespace,
    Provider,
    Queue,
    QueueEvent,
    Worker,
    now,
)
from lakeshore.store.port import StoredKey

S = TypeVar("S", bound=msgspec.Struct)

#: The column order of an invocation event tuple (``store._rows.INVOCATION_EVENT_COLUMNS``,
#: which the contract tests check it equals): the fields of the row type.
INVOCATION_EVENT_COLUMNS: tuple[str, ...] = InvocationEvent.__struct_fields__

_encode = msgspec.json.Encoder().encode
_json = msgspec.json.Decoder().decode


def _utc(value: datetime) -> datetime:
    """A ``TIMESTAMPTZ`` read back: in UTC, a naive value taken as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _row(type_: type[S], obj: msgspec.Struct) -> S:
    """``obj`` as the database returns it: a new ``type_``, times in UTC, JSON deep-copied."""
    times = {
        f: _utc(v) for f in obj.__struct_fields__ if isinstance(v := getattr(obj, f), datetime)
    }
    return msgspec.json.decode(_encode(replace(obj, **times)), type=type_)


def _copy(row: S | None) -> S | None:
    return None if row is None else _row(type(row), row)


def _copies(rows: Iterable[S]) -> list[S]:
    return [_row(type(r), r) for r in rows]


def _event_row(row: tuple[Any, ...] | msgspec.Struct) -> tuple[Any, ...]:
    """An event as stored: a tuple, ``type`` a str, ``detail`` through JSON (deep-copied).

    ``ValueError`` when a tuple does not have one value per column."""
    cols = INVOCATION_EVENT_COLUMNS
    struct = isinstance(row, msgspec.Struct)
    values = tuple(getattr(row, c) for c in cols) if struct else tuple(row)
    if len(values) != len(cols):
        raise ValueError(f"invocation event rows have {len(cols)} values, got {values!r}")
    ns, queue, inv, ts, type_, attempt, worker, epoch, detail = values
    ts = _utc(ts) if isinstance(ts, datetime) else ts
    detail = None if detail is None else _json(_encode(detail))
    return (ns, queue, inv, ts, str(type_), attempt, worker, epoch, detail)


def _fence(events: Sequence[tuple[str, int | None, str | None]]) -> Fence:
    """The fence of one invocation's accepted ``(type, epoch, worker)`` events, as in
    fences.py: the greatest epoch of a RAISES_EPOCH type (else 0), the greatest ``epoch *
    RANK_BASE + rank`` of a ranked type (else -1), the state of a terminal type (fencing
    allows one), the kept ``(epoch, worker)`` of the CLAIMING types that name a worker, and
    whether a ``submitted`` is among them.
    """
    started = max(((e or 0) for t, e, _ in events if t in RAISES_EPOCH), default=0)
    top = max(((e or 0) * RANK_BASE + RANK[t] for t, e, _ in events if t in RANK), default=-1)
    terminal = next((TERMINAL[t] for t, _, _ in events if t in TERMINAL), None)
    claims = ((e or 0, w) for t, e, w in events if t in CLAIMING and w is not None)
    submitted = any(t == EventType.SUBMITTED for t, _, _ in events)
    return Fence(started, top, terminal, kept_claims(claims, started), submitted)


class InMemoryStore:
    """Every row-store port in memory (see the module docstring for what it leaves out).

    No method awaits, so each call is atomic on the event loop as the DuckDB store's calls
    are on its thread. After :meth:`close`, calls raise :class:`errors.Unavailable`.
    """

    def __init__(self) -> None:
        self._closed = False
        self._namespaces: dict[str, Namespace] = {}
        self._queues: dict[tuple[str, str], Queue] = {}
        self._workers: dict[str, Worker] = {}
        self._providers: dict[tuple[str, str], Provider] = {}
        self._queue_events: list[QueueEvent] = []
        #: appended invocation events, in append order, as INVOCATION_EVENT_COLUMNS tuples
        self.invocation_events: list[tuple[Any, ...]] = []
        self._batches: set[int] = set()
        self._position = 0  # the greatest pruned sequence (fences.events_position)
        #: (namespace, queue, key) -> (what it names, when it was stored)
        self._keys: dict[tuple[str, str, str], tuple[StoredKey, datetime]] = {}

    def _live(self) -> None:
        if self._closed:
            raise errors.Unavailable("the store is closed")

    async def close(self) -> None:
        """Idempotent; calls made afterwards raise :class:`errors.Unavailable`."""
        self._closed = True

    async def __aenter__(self) -> InMemoryStore:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ---- namespaces -----------------------------------------------------------------

    async def insert_namespace(self, ns: Namespace) -> None:
        """Seed a namespace; ``AlreadyExists`` when the name is taken."""
        self._live()
        if ns.name in self._namespaces:
            raise errors.AlreadyExists("namespace", ns.name, "")
        self._namespaces[ns.name] = _row(Namespace, ns)

    async def get_namespace(self, name: str) -> Namespace | None:
        self._live()
        return _copy(self._namespaces.get(name))

    # ---- queues ---------------------------------------------------------------------

    async def insert_queue(self, q: Queue) -> None:
        self._live()
        if (q.namespace, q.name) in self._queues:
            raise errors.AlreadyExists("queue", q.name, f" in namespace {q.namespace!r}")
        self._queues[(q.namespace, q.name)] = _row(Queue, q)

    async def update_queue(self, q: Queue) -> None:
        self._live()
        if (q.namespace, q.name) not in self._queues:
            raise errors.QueueNotFound(q.namespace, q.name)
        self._queues[(q.namespace, q.name)] = _row(Queue, q)

    async def delete_queue(self, namespace: str, name: str) -> bool:
        self._live()
        return self._queues.pop((namespace, name), None) is not None

    async def get_queue(self, namespace: str, name: str) -> Queue | None:
        self._live()
        return _copy(self._queues.get((namespace, name)))

    async def all_queues(self) -> list[Queue]:
        self._live()
        return _copies(self._queues[k] for k in sorted(self._queues))

    # ---- workers --------------------------------------------------------------------

    async def upsert_worker(self, w: Worker) -> None:
        """Insert, or overwrite by id (a rename or a move included); names are unique."""
        self._live()
        for other in self._workers.values():
            if (other.namespace, other.name) == (w.namespace, w.name) and other.id != w.id:
                raise errors.AlreadyExists(
                    "worker", w.name, f" in namespace {w.namespace!r} with id {other.id!r}"
                )
        self._workers[w.id] = _row(Worker, w)

    async def list_workers(self, namespace: str | None = None) -> list[Worker]:
        self._live()
        rows = [w for w in self._workers.values() if namespace in (None, w.namespace)]
        return _copies(sorted(rows, key=lambda w: (w.namespace, w.name)))

    async def delete_worker(self, id: str) -> bool:
        self._live()
        return self._workers.pop(id, None) is not None

    async def update_liveness(self, workers: Sequence[Worker]) -> None:
        """Overwrite status, current and last heartbeat by id; unknown ids are skipped."""
        self._live()
        for w in workers:
            if (row := self._workers.get(w.id)) is not None:
                seen = None if w.last_heartbeat is None else _utc(w.last_heartbeat)
                self._workers[w.id] = replace(
                    row,
                    status=w.status,
                    current=w.current,
                    running=list(w.running),
                    resources=w.resources,
                    last_heartbeat=seen,
                )

    async def scrub_queue_from_workers(self, namespace: str, queue: str) -> list[Worker]:
        self._live()
        hit = [w for w in self._workers.values() if w.namespace == namespace and queue in w.queues]
        changed = [
            replace(w, queues=[q for q in w.queues if q != queue])
            for w in sorted(hit, key=lambda w: w.name)
        ]
        self._workers.update((w.id, w) for w in changed)
        return _copies(changed)

    # ---- providers ------------------------------------------------------------------

    async def insert_provider(self, p: Provider) -> None:
        self._live()
        if (p.namespace, p.name) in self._providers:
            raise errors.AlreadyExists("provider", p.name, f" in namespace {p.namespace!r}")
        self._providers[(p.namespace, p.name)] = _row(Provider, p)

    async def get_provider(self, namespace: str, name: str) -> Provider | None:
        self._live()
        return _copy(self._providers.get((namespace, name)))

    async def update_provider(self, p: Provider) -> None:
        self._live()
        if (p.namespace, p.name) in self._providers:
            self._providers[(p.namespace, p.name)] = _row(Provider, p)

    async def list_providers(self, namespace: str) -> list[Provider]:
        self._live()
        return _copies(self._providers[k] for k in sorted(self._providers) if k[0] == namespace)

    async def delete_provider(self, namespace: str, name: str) -> Provider | None:
        self._live()
        return self._providers.pop((namespace, name), None)

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
        """The stored event; ids count from 1 in append order, as DuckDB's sequence does."""
        self._live()
        stamp = now() if ts is None else ts
        event = QueueEvent(id=len(self._queue_events) + 1, namespace=namespace, queue=queue,
                           ts=stamp, type=type, actor=actor, detail=detail)  # fmt: skip
        self._queue_events.append(_row(QueueEvent, event))
        return _row(QueueEvent, self._queue_events[-1])

    async def list_queue_events(
        self,
        namespace: str,
        queue: str,
        limit: int = 50,
        verbose: bool = False,
        since: datetime | None = None,
    ) -> list[QueueEvent]:
        if limit < 0:
            raise errors.Invalid(f"limit must be 0 or more, got {limit}")
        self._live()
        key = (namespace, queue)
        floor = None if since is None else _utc(since)
        mine = [
            e
            for e in reversed(self._queue_events)
            if (e.namespace, e.queue) == key and (floor is None or e.ts >= floor)
        ]
        return _copies(e if verbose else replace(e, detail=None) for e in mine[:limit])

    # ---- invocation history ---------------------------------------------------------

    async def append_invocation_events(
        self, rows: Sequence[tuple[Any, ...] | msgspec.Struct], *, batches: Sequence[int] = ()
    ) -> int:
        """Append rows and batch sequences together; on a ``ValueError``, neither."""
        if not rows and not batches:
            return 0
        self._live()
        stored = [_event_row(r) for r in rows]
        self.invocation_events.extend(stored)
        self._batches.update(int(s) for s in batches)
        return len(stored)

    async def recorded_batches(self, seqs: Sequence[int]) -> set[int]:
        self._live()
        return {s for s in seqs if s in self._batches}

    async def prune_recorded_batches(self, ack_floor: int, last_seq: int) -> None:
        self._live()
        self._position = max([self._position, *self._batches])
        self._batches = {s for s in self._batches if ack_floor < s <= last_seq}

    async def events_position(self) -> int | None:
        self._live()
        return max([self._position, *self._batches])

    def _fences(self, wanted: Callable[[Key], bool]) -> dict[Key, Fence]:
        """Fences of the wanted invocations that have an accepted event."""
        accepted: dict[Key, list[tuple[str, int | None, str | None]]] = {}
        for ns, _q, inv, _ts, type_, _a, worker, epoch, _d in self.invocation_events:
            if type_ != EventType.STALE and wanted((ns, inv)):
                accepted.setdefault((ns, inv), []).append((type_, epoch, worker))
        return {key: _fence(events) for key, events in accepted.items()}

    async def fences(self, ids: Sequence[str]) -> dict[Key, Fence]:
        self._live()
        wanted = set(ids)
        return self._fences(lambda key: key[1] in wanted)

    async def unfinished_fences(self) -> dict[Key, Fence]:
        self._live()
        return {k: f for k, f in self._fences(lambda key: True).items() if not f.finished}

    async def max_invocation_id(self) -> str | None:
        self._live()
        return max((row[2] for row in self.invocation_events), default=None)

    # ---- idempotency keys -----------------------------------------------------------

    async def get_keys(
        self, namespace: str, queue: str, keys: Sequence[str], since: datetime
    ) -> dict[str, StoredKey]:
        self._live()
        found = {k: self._keys.get((namespace, queue, k)) for k in keys}
        return {k: v[0] for k, v in found.items() if v is not None and v[1] >= _utc(since)}

    async def put_keys(
        self, namespace: str, queue: str, keys: dict[str, StoredKey], at: datetime
    ) -> None:
        self._live()
        for key, entry in keys.items():
            self._keys[(namespace, queue, key)] = (entry, _utc(at))

    async def forget_keys(
        self, namespace: str, queue: str, keys: Sequence[str] | None = None
    ) -> None:
        self._live()
        gone = None if keys is None else set(keys)
        self._keys = {
            k: v
            for k, v in self._keys.items()
            if k[:2] != (namespace, queue) or (gone is not None and k[2] not in gone)
        }

    async def prune_keys(self, before: datetime) -> int:
        self._live()
        old = [k for k, (_, at) in self._keys.items() if at < _utc(before)]
        for k in old:
            del self._keys[k]
        return len(old)

    async def recorded_ids(self, namespace: str, ids: Sequence[str]) -> set[str]:
        self._live()
        wanted = set(ids)
        return {
            row[2] for row in self.invocation_events if row[0] == namespace and row[2] in wanted
        }
