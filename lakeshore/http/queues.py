"""Queue routes: thin — parse, authorise, ask the directory or a queue actor, render."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec
from aiohttp import web
from msgspec import Struct

from lakeshore.actors.directory import CreateQueue, EnsureDefault, Lookup, RemoveQueue
from lakeshore.actors.queue import GetQueue, PatchQueue, Transition, levels_of
from lakeshore.actors.workers import Members
from lakeshore.errors import Invalid
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import PLANE
from lakeshore.model import (
    Member,
    Queue,
    QueueCreate,
    QueueDetail,
    QueueEvent,
    QueuePatch,
    QueueState,
    QueueStats,
    WorkerStatus,
    now,
    validate_name,
)
from lakeshore.store.jobs import QueueActivity

routes = Routes()
BASE = "/v1/namespaces/{ns}/queues"


class QueueList(Struct, frozen=True):
    queues: list[Queue]


class EventList(Struct, frozen=True):
    events: list[QueueEvent]


class Deleted(Struct, frozen=True):
    deleted: str
    namespace: str
    scrubbed: list[str]


def _name(request: web.Request) -> str:
    return validate_name("queue", request.match_info["name"])


async def _queue_ref(request: web.Request):
    ns = await namespace(request)
    return ns, await request.app[PLANE].directory.ask(Lookup(ns.name, _name(request)))


@routes.route("POST", BASE, "Create a queue", body=QueueCreate, answer=Queue, status=201)
async def create(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, QueueCreate)
    plane = request.app[PLANE]
    row = await plane.directory.ask(CreateQueue(ns.name, body, caller(request).token_id))
    return reply(row, status=201)


@routes.route(
    "GET", BASE, "List the queues of every namespace in the org", answer=QueueList, query=("state",)
)
async def list_queues(request: web.Request) -> web.Response:
    ns = await namespace(request)
    state = _state_filter(request.query.get("state"))
    plane = request.app[PLANE]
    await plane.directory.ask(EnsureDefault(ns.name))
    siblings = [n.name for n in await plane.store.list_namespaces(ns.org)]
    return reply(QueueList(await plane.store.list_queues(siblings, state)))


def _state_filter(raw: str | None) -> QueueState | None:
    if raw is None:
        return None
    try:
        return QueueState(raw)
    except ValueError:
        allowed = ", ".join(s.value for s in QueueState)
        raise Invalid(f"unknown state {raw!r}; use one of {allowed}") from None


@routes.route("GET", BASE + "/{name}", "A queue row with its members", answer=QueueDetail)
async def show(request: web.Request) -> web.Response:
    ns, ref = await _queue_ref(request)
    row: Queue = await ref.ask(GetQueue())
    members = await request.app[PLANE].workers.ask(Members(ns.name, row.name))
    detail = QueueDetail(
        **msgspec.structs.asdict(row),
        members=[
            Member(
                id=w.id,
                name=w.name,
                status=w.status,
                queues=w.queues,
                current=w.current,
                last_heartbeat=w.last_heartbeat,
            )
            for w in members
        ],
    )
    return reply(detail)


@routes.route(
    "PATCH",
    BASE + "/{name}",
    "Change description, admission or elasticity",
    body=QueuePatch,
    answer=Queue,
)
async def patch(request: web.Request) -> web.Response:
    _, ref = await _queue_ref(request)
    body = await decode_body(request, QueuePatch)
    return reply(await ref.ask(PatchQueue(body, caller(request).token_id)))


def _transition(verb: str, summary: str) -> None:
    @routes.route("POST", BASE + "/{name}/" + verb, summary, answer=Queue)
    async def handler(request: web.Request) -> web.Response:
        _, ref = await _queue_ref(request)
        return reply(await ref.ask(Transition(verb, caller(request).token_id)))  # type: ignore[arg-type]


_transition("drain", "Stop admitting; finish in-flight and queued work")
_transition("archive", "Soft-delete: keep the row, admit nothing")
_transition("unarchive", "Back to active (reverses drain and archive)")


@routes.route(
    "DELETE",
    BASE + "/{name}",
    "Hard delete (?force=true scrubs members first)",
    answer=Deleted,
    query=("force",),
)
async def remove(request: web.Request) -> web.Response:
    ns = await namespace(request)
    name = _name(request)
    force = _flag(request, "force")
    plane = request.app[PLANE]
    scrubbed = await plane.directory.ask(
        RemoveQueue(ns.name, name, force, caller(request).token_id)
    )
    return reply(Deleted(deleted=name, namespace=ns.name, scrubbed=[w.name for w in scrubbed]))


def _flag(request: web.Request, key: str) -> bool:
    raw = request.query.get(key, "false").lower()
    if raw not in ("true", "false", "1", "0", ""):
        raise Invalid(f"query parameter {key} must be true or false, got {raw!r}")
    return raw in ("true", "1", "")


@routes.route(
    "GET",
    BASE + "/{name}/events",
    "Recorded changes and decisions, newest first",
    answer=EventList,
    query=("verbose", "limit"),
)
async def events(request: web.Request) -> web.Response:
    ns, ref = await _queue_ref(request)
    row: Queue = await ref.ask(GetQueue())
    limit = _limit(request.query.get("limit"))
    rows = await request.app[PLANE].store.list_queue_events(
        ns.name, row.name, limit=limit, verbose=_flag(request, "verbose")
    )
    return reply(EventList(rows))


def _limit(raw: str | None) -> int:
    if raw is None:
        return 50
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 1000:
        raise Invalid(f"limit must be an integer from 1 to 1000, got {raw!r}")
    return limit


@routes.route("GET", BASE + "/{name}/stats", "Daemons, utilisation and backlog", answer=QueueStats)
async def stats(request: web.Request) -> web.Response:
    ns, ref = await _queue_ref(request)
    plane = request.app[PLANE]
    row: Queue = await ref.ask(GetQueue())
    members = await plane.workers.ask(Members(ns.name, row.name))
    live = [w for w in members if w.status is not WorkerStatus.LOST]
    busy = sum(1 for w in live if w.status is WorkerStatus.BUSY)
    counts = await plane.bus.queue_counts(ns.name, row.name, levels=levels_of(row.kind))
    at = now()
    # submitted / succeeded / failed and the waits are over the last 5 minutes (spec/api.md).
    recent = await plane.store.queue_activity(ns.name, row.name, at - timedelta(minutes=5))
    return reply(_stats(row, len(live), busy, counts, recent, at))


def _stats(
    row: Queue, daemons: int, busy: int, counts: Any, recent: QueueActivity, at: datetime
) -> QueueStats:
    oldest = recent.oldest_pending_at
    return QueueStats(
        namespace=row.namespace,
        queue=row.name,
        daemon_count=daemons,
        busy=busy,
        utilization=round(busy / daemons, 4) if daemons else 0.0,
        pending=counts.pending,
        running=counts.running,
        depth=counts.depth,
        state=row.state,
        max_depth=row.max_depth,
        oldest_pending_age_s=None if oldest is None else max(0.0, (at - oldest).total_seconds()),
        submitted=recent.submitted,
        succeeded=recent.succeeded,
        failed=recent.failed,
        wait_p50_s=recent.wait_p50_s,
        wait_p95_s=recent.wait_p95_s,
    )
