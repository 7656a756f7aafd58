"""What a standby control plane serves: its health, and ``503 not_leader`` for the rest.

A standby holds no actors and takes no request: every route but the health checks answers
``503`` with code ``not_leader``, the leader's URL (``leader_url``, when one is elected)
and ``Retry-After``, so clients go there (the SDK and CLI follow it by themselves).
``/readyz`` is ``503`` too: load balancers send traffic to the leader only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from lakeshore import __version__
from lakeshore.errors import NotLeader
from lakeshore.http.errors import error_middleware, render
from lakeshore.http.meta import Health
from lakeshore.http.routes import reply

#: Where the leader's API is now (``None``: no leader elected).
LeaderUrl = Callable[[], Awaitable[str | None]]


def leading_middleware(
    leading: Callable[[], bool],
    leader_url: LeaderUrl,
    applied: Callable[[], int],
    own_url: Callable[[], str | None] = lambda: None,
) -> Middleware:
    """Once ``leading()`` is false, answer as a standby: ``not_leader`` for every route but
    ``/v1/healthz``. A leader that steps down keeps its listener (no connection is cut).
    ``own_url``: this plane's advertised URL; the lease naming it while this plane does not
    lead yet means it is taking over."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if leading():
            return await handler(request)
        if request.path == "/v1/healthz":
            return _standby_health(applied())
        url = await leader_url()
        if url is None:
            why = "a leader is being elected"
        elif url == own_url():
            why = "this control plane is taking over as leader"
        else:
            why = "this control plane stepped down"
        answer = render(NotLeader(why, url))
        # The client's next request opens a new connection: to the app this plane serves
        # now (a new term's), not again to this one's (see lakeshore/http/doors.py).
        answer.force_close()
        return answer

    return middleware


def standby_app(
    leader_url: LeaderUrl,
    applied: Callable[[], int],
    own_url: Callable[[], str | None] = lambda: None,
) -> web.Application:
    """What a plane that never led since it started serves: everything as a standby.

    Args:
        leader_url: where the leader is now.
        applied: the state stream's sequence this plane's file has applied.
        own_url: this plane's advertised URL (see :func:`leading_middleware`).
    """
    standby = leading_middleware(lambda: False, leader_url, applied, own_url)
    app = web.Application(middlewares=[error_middleware, standby])
    app.router.add_route("*", "/{tail:.*}", _unreached)
    return app


async def _unreached(request: web.Request) -> web.Response:
    raise AssertionError("the standby's middleware answers every request")


def _standby_health(applied: int) -> web.Response:
    return reply(Health(status="standby", version=__version__, applied_seq=applied))
