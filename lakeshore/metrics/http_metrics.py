"""HTTP request counts and durations, labelled by route template, method and status.

Labelling by the template (``/v1/namespaces/{ns}/jobs/{id}``), never the raw path, keeps
the label values as many as the routes; a path no route matches is ``_unmatched``.
"""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry, Counter, Histogram

#: The route label of a request no route matched.
UNMATCHED = "_unmatched"
#: Bucket bounds in seconds (result waits hold a request open for up to minutes).
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class HttpMetrics:
    """Args:
    registry: where the counter and histogram are registered.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "lakeshore_http_requests",
            "HTTP requests answered, by route template, method and status code.",
            ("route", "method", "code"),
            registry=registry,
        )
        self.duration = Histogram(
            "lakeshore_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template and method.",
            ("route", "method"),
            buckets=BUCKETS_S,
            registry=registry,
        )

    def middleware(self) -> Middleware:
        """An aiohttp middleware; put it first, so it sees the status the error middleware
        answered."""

        @web.middleware
        async def http_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
            start = time.perf_counter()
            code = 500
            try:
                response = await handler(request)
                code = response.status
                return response
            except web.HTTPException as e:
                code = e.status
                raise
            finally:
                route = route_of(request)
                self.requests.labels(route, request.method, str(code)).inc()
                self.duration.labels(route, request.method).observe(time.perf_counter() - start)

        return http_metrics


def route_of(request: web.Request) -> str:
    """The template of the route that matched ``request``."""
    resource = request.match_info.route.resource
    return UNMATCHED if resource is None else resource.canonical
