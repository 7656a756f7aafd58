"""The daemon routes: launch (202) and join (a daemon gets its NATS access); thin."""

from __future__ import annotations

from aiohttp import web

from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import FLEET
from lakeshore.model import DaemonAccess, DaemonJoin, DaemonLaunch, Launched

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


@routes.route(
    "POST",
    "/v1/namespaces/{ns}/daemons/join",
    "A daemon's way onto NATS: its URL, the daemon's id, a short-lived credential and the CA",
    body=DaemonJoin,
    answer=DaemonAccess,
)
async def join(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, DaemonJoin)
    return reply(await request.app[FLEET].join(caller(request), ns, body))
