"""The aiohttp application: middlewares, every route module, typed state."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware

from lakeshore.http import (
    backup,
    bus,
    code,
    controller,
    daemons,
    dashboard,
    history,
    invocations,
    jobs,
    logs,
    meta,
    metrics,
    namespaces,
    providers,
    queues,
    workers,
)
from lakeshore.http.auth import auth_middleware
from lakeshore.http.errors import error_middleware
from lakeshore.http.state import (
    ACCESS,
    BACKUP,
    CODE,
    FLEET,
    HISTORY,
    JOBS,
    LOGS,
    PROBLEMS,
    QUEUES,
    REPLICA,
)
from lakeshore.metrics import PlaneMetrics
from lakeshore.services import Services

ROUTE_MODULES = (
    meta,
    namespaces,
    queues,
    invocations,
    jobs,
    logs,
    code,
    workers,
    daemons,
    providers,
    controller,
    bus,
    dashboard,
    history,
    metrics,
    backup,
)
#: Largest request body accepted (bytes); larger answers 413.
MAX_BODY_BYTES = 4 * 1024 * 1024


def make_app(
    services: Services,
    plane_metrics: PlaneMetrics | None = None,
    *,
    leading: Middleware | None = None,
) -> web.Application:
    """The whole API of a leader.

    Args:
        leading: checks that the plane still leads before any route (a leader that steps
            down keeps serving this app, answering ``not_leader``, until a next term's).
    """
    chain = [error_middleware, *([leading] if leading else []), auth_middleware]
    app = web.Application(middlewares=chain, client_max_size=MAX_BODY_BYTES)
    app[ACCESS] = services.access
    app[JOBS] = services.jobs
    app[QUEUES] = services.queues
    app[FLEET] = services.fleet
    app[PROBLEMS] = services.problems
    app[HISTORY] = services.history
    app[BACKUP] = services.backup
    app[REPLICA] = services.replica
    if services.logs is not None:
        app[LOGS] = services.logs
    if services.code is not None:
        app[CODE] = services.code
    docs = [d for m in ROUTE_MODULES for d in m.routes.docs]
    app[meta.OPENAPI] = meta.build_openapi(docs)
    for m in ROUTE_MODULES:
        app.add_routes(m.routes.table)
    if plane_metrics is not None:
        metrics.install(app, plane_metrics)
    return app
