"""The daemon launch route: thin — authorise, ask the Launcher, answer 202."""

from __future__ import annotations

from aiohttp import web

from lakeshore.actors.launcher import Launch
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import PLANE
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
    launched = await request.app[PLANE].launcher.ask(
        Launch(ns.name, body, caller(request).token_id)
    )
    return reply(launched, status=202)
