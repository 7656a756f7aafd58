"""The controller's status route: per queue and pool, desired, actual and why."""

from __future__ import annotations

from aiohttp import web

from lakeshore.http.auth import namespace
from lakeshore.http.routes import Routes, reply
from lakeshore.http.state import FLEET
from lakeshore.model import ControllerStatus

routes = Routes()


@routes.route(
    "GET",
    "/v1/namespaces/{ns}/controller",
    "The controller's last tick: per queue and pool, desired, actual, launching and why; "
    "the live steal leases",
    answer=ControllerStatus,
)
async def status(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(await request.app[FLEET].controller_status(ns.name))
