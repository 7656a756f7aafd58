"""The daemon launch route: thin — authorise, ask the FleetService, answer 202."""

from __future__ import annotations

from aiohttp import web

from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import FLEET
from lakeshore.model import DaemonLaunch, Launched

routes = Routes()


@routes.route(
    "POST",
    "/v1/namespaces/{ns}/daemons",
    "Launch daemons on a provider; they answer 'starting' and register shortly after",
    body=DaemonLaunch,
    answer=Launched,
    status=202,
)
async def launch(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, DaemonLaunch)
    launched = await request.app[FLEET].launch(ns.name, body, caller(request).token_id)
    return reply(launched, status=202)
