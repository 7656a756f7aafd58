"""``GET /metrics``: the Prometheus text, on the API (with a token) or on a listener of its own.

The API's route is guarded like every other and shows an org's token only its org's
series (:mod:`lakeshore.metrics.view`), the admin token every series. ``--metrics-port``
opens a second listener, bound to loopback unless told otherwise, that serves only this
document, whole, and asks no token (scrapers rarely carry one).
"""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web

from lakeshore.http.auth import caller
from lakeshore.http.routes import Routes
from lakeshore.http.state import ACCESS
from lakeshore.metrics import CONTENT_TYPE, PlaneMetrics

routes = Routes()

METRICS: web.AppKey[PlaneMetrics] = web.AppKey("metrics", PlaneMetrics)


@routes.route("GET", "/metrics", "Prometheus metrics (text format 0.0.4)")
async def metrics(request: web.Request) -> web.Response:
    m = request.app.get(METRICS)
    if m is None:  # an app built without metrics (make_app's default)
        raise web.HTTPNotFound()
    org = caller(request).org
    if org is None:  # the admin: the whole plane
        return await _render(m)
    namespaces = await request.app[ACCESS].list_namespaces(org)
    return await _render(m, {ns.name for ns in namespaces})


async def _render(m: PlaneMetrics, namespaces: Collection[str] | None = None) -> web.Response:
    response = web.Response(body=await m.render(namespaces))
    # Set whole: the version and charset parameters are part of Prometheus's content type.
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


def scrape_app(m: PlaneMetrics) -> web.Application:
    """The ``--metrics-port`` listener's application: ``GET /metrics`` only, no token."""

    async def scrape(request: web.Request) -> web.Response:
        return await _render(m)

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    return app


def install(app: web.Application, m: PlaneMetrics) -> None:
    """Answer ``GET /metrics`` on the API with ``m`` and count the API's requests in it
    (call before the app starts)."""
    app[METRICS] = m
    # First, so the status counted is the one the error middleware answered.
    app.middlewares.insert(0, m.http.middleware())
