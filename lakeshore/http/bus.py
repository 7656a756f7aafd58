"""The bus route: where the SDK's NATS fast path connects; thin."""

from __future__ import annotations

from aiohttp import web

from lakeshore.http.routes import Routes, reply
from lakeshore.http.state import FLEET
from lakeshore.model import BusAccess

routes = Routes()


@routes.route(
    "GET",
    "/v1/bus",
    "Where the SDK's fast path reaches NATS: the URL(s) and the CA. It connects as user "
    "producer/<nonce> with its token as the password, and may then submit and wait for "
    "results in its org's namespaces (ls.<ns>.submit.<queue>, ls.<ns>.result.<id>)",
    answer=BusAccess,
)
async def bus(request: web.Request) -> web.Response:
    return reply(request.app[FLEET].bus_access())
