"""Queue routes: thin — decode, authorise, call the QueueService, encode."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from lakeshore.http import query
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import QUEUES
from lakeshore.model import (
    Queue,
    QueueCreate,
    QueueDetail,
    QueueEvent,
    QueuePage,
    QueuePatch,
    QueueState,
    QueueStats,
    validate_name,
)

routes = Routes()
BASE = "/v1/namespaces/{ns}/queues"


class EventList(Struct, frozen=True):
    events: list[QueueEvent]


class Deleted(Struct, frozen=True):
    deleted: str
    namespace: str
    scrubbed: list[str]


def _name(request: web.Request) -> str:
    return validate_name("queue", request.match_info["name"])


@routes.route("POST", BASE, "Create a queue", body=QueueCreate, answer=Queue, status=201)
async def create(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, QueueCreate)
    row = await request.app[QUEUES].create(ns.name, body, caller(request).token_id)
    return reply(row, status=201)


@routes.route(
    "GET",
    BASE,
    "List the queues of every namespace in the org (pages with ?limit=, then ?after=next)",
    answer=QueuePage,
    query=("state", "limit", "after"),
)
async def list_queues(request: web.Request) -> web.Response:
    ns = await namespace(request)
    state = query.choice(request, "state", QueueState)
    after = query.queue_cursor(request, "after")
    # Without ?limit= the whole list, as before pages existed (a paged client sends one).
    limit = None if "limit" not in request.query else query.limit(request, default=100)
    rows = await request.app[QUEUES].list(ns, state, limit=limit, after=after)
    last = rows[-1] if limit is not None and len(rows) == limit else None
    return reply(QueuePage(queues=rows, next=None if last is None else query.cursor_of(last)))


@routes.route("GET", BASE + "/{name}", "A queue row with its members", answer=QueueDetail)
async def show(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(await request.app[QUEUES].show(ns.name, _name(request)))


@routes.route(
    "PATCH",
    BASE + "/{name}",
    "Change description, admission or elasticity",
    body=QueuePatch,
    answer=Queue,
)
async def patch(request: web.Request) -> web.Response:
    ns = await namespace(request)
    name = _name(request)
    body = await decode_body(request, QueuePatch)
    return reply(await request.app[QUEUES].patch(ns.name, name, body, caller(request).token_id))


def _transition(verb: str, summary: str) -> None:
    @routes.route("POST", BASE + "/{name}/" + verb, summary, answer=Queue)
    async def handler(request: web.Request) -> web.Response:
        ns = await namespace(request)
        queues = request.app[QUEUES]
        return reply(
            await queues.transition(ns.name, _name(request), verb, caller(request).token_id)  # type: ignore[arg-type]
        )


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
    force = query.flag(request, "force")
    done = await request.app[QUEUES].remove(ns.name, name, force, caller(request).token_id)
    return reply(Deleted(deleted=done.queue, namespace=done.namespace, scrubbed=done.scrubbed))


@routes.route(
    "GET",
    BASE + "/{name}/events",
    "Recorded changes and decisions, newest first",
    answer=EventList,
    query=("verbose", "limit"),
)
async def events(request: web.Request) -> web.Response:
    ns = await namespace(request)
    rows = await request.app[QUEUES].events(
        ns.name,
        _name(request),
        limit=query.limit(request, default=50),
        verbose=query.flag(request, "verbose"),
    )
    return reply(EventList(rows))


@routes.route("GET", BASE + "/{name}/stats", "Daemons, utilisation and backlog", answer=QueueStats)
async def stats(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(await request.app[QUEUES].stats(ns.name, _name(request)))
