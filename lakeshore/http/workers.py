"""Worker routes: list, show, and edit queue membership (``Worker.queues``)."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from lakeshore.actors.workers import EditQueues, Retire
from lakeshore.errors import WorkerNotFound
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import PLANE
from lakeshore.model import DaemonControl, MembershipEdit, Worker

routes = Routes()
BASE = "/v1/namespaces/{ns}/workers"


class WorkerList(Struct, frozen=True):
    workers: list[Worker]


@routes.route("GET", BASE, "The namespace's workers", answer=WorkerList)
async def list_workers(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(WorkerList(await request.app[PLANE].store.list_workers(ns.name)))


@routes.route("GET", BASE + "/{id}", "One worker, by id or name", answer=Worker)
async def show(request: web.Request) -> web.Response:
    ns = await namespace(request)
    ref = request.match_info["id"]
    worker = await request.app[PLANE].store.get_worker(ns.name, ref)
    if worker is None:
        raise WorkerNotFound(ns.name, ref)
    return reply(worker)


@routes.route(
    "POST",
    BASE + "/{id}/queues",
    "Add and remove queues of a worker",
    body=MembershipEdit,
    answer=Worker,
)
async def edit_queues(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, MembershipEdit)
    edit = EditQueues(
        ns.name, request.match_info["id"], body.add, body.remove, caller(request).token_id
    )
    return reply(await request.app[PLANE].workers.ask(edit))


@routes.route(
    "DELETE",
    BASE + "/{id}",
    "Retire a worker: it finishes its current run, then exits",
    answer=Worker,
    status=202,
)
async def retire(request: web.Request) -> web.Response:
    ns = await namespace(request)
    plane = request.app[PLANE]
    worker = await plane.workers.ask(Retire(ns.name, request.match_info["id"]))
    await plane.bus.send_control(ns.name, worker.id, DaemonControl(retire=True))
    return reply(worker, status=202)
