"""Bearer-token authentication middleware and the per-namespace check handlers call."""

from __future__ import annotations

from aiohttp import web

from lakeshore.access import Caller
from lakeshore.http import dashboard
from lakeshore.http.state import ACCESS
from lakeshore.model import Namespace

CALLER: web.RequestKey[Caller] = web.RequestKey("caller", Caller)
#: Routes that answer without a token.
PUBLIC_PATHS = frozenset({"/v1/healthz", "/v1/openapi.json", "/readyz"})


@web.middleware
async def auth_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Identify the caller of every route that asks a token (401 for none or a bad one).

    A path no route matches (404), or a method its path has not (405), answers so with or
    without a token: the router decided before this middleware runs, the route table is
    public (``/v1/openapi.json``), and a 401 would send a user hunting for a token when the
    URL is what is wrong. A known route is checked whatever its path parameters name, so an
    unknown namespace or another org's is answered only after the token is.
    """
    unrouted = request.match_info.http_exception is not None
    if not unrouted and request.path not in PUBLIC_PATHS and not dashboard.is_public(request.path):
        request[CALLER] = await request.app[ACCESS].identify(request.headers.get("Authorization"))
    return await handler(request)


def caller(request: web.Request) -> Caller:
    return request[CALLER]


async def namespace(request: web.Request) -> Namespace:
    """The ``:ns`` of the path, once the caller is allowed to act on it (404 / 403)."""
    return await request.app[ACCESS].authorize(caller(request), request.match_info["ns"])
