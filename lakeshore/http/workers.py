"""Worker routes: list, show, patch labels, edit queue membership (``Worker.queues``), retire."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from lakeshore.http import query
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import FLEET
from lakeshore.model import MembershipEdit, Worker, WorkerEdited, WorkerPatch

routes = Routes()
BASE = "/v1/namespaces/{ns}/workers"


class WorkerList(Struct, frozen=True):
    workers: list[Worker]


@routes.route("GET", BASE, "The namespace's workers", answer=WorkerList)
async def list_workers(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(WorkerList(await request.app[FLEET].list_workers(ns.name)))


@routes.route("GET", BASE + "/{id}", "One worker, by id or name", answer=Worker)
async def show(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(await request.app[FLEET].worker(ns.name, request.match_info["id"]))


@routes.route(
    "PATCH",
    BASE + "/{id}",
    "Replace a worker's labels; the daemon keeps running",
    body=WorkerPatch,
    answer=Worker,
)
async def patch(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, WorkerPatch)
    return reply(await request.app[FLEET].patch_worker(ns.name, request.match_info["id"], body))


@routes.route(
    "POST",
    BASE + "/{id}/queues",
    "Add and remove queues of a worker; warns of an added queue that does not exist yet",
    body=MembershipEdit,
    answer=WorkerEdited,
)
async def edit_queues(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, MembershipEdit)
    worker = await request.app[FLEET].edit_queues(
        ns.name, request.match_info["id"], body, caller(request).token_id
    )
    return reply(worker)


@routes.route(
    "DELETE",
    BASE + "/{id}",
    "Retire a worker: it finishes its current run, then exits (?force=true: its provider "
    "stops its process or job now)",
    answer=Worker,
    status=202,
    query=("force",),
)
async def retire(request: web.Request) -> web.Response:
    ns = await namespace(request)
    force = query.flag(request, "force")
    worker = await request.app[FLEET].retire(ns.name, request.match_info["id"], force=force)
    return reply(worker, status=202)
