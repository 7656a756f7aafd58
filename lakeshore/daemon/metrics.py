"""A daemon's own Prometheus metrics on ``--metrics-port``: runs in flight, claims, run time.

Built by the daemon's composition root (:mod:`lakeshore.daemon.main`) only when a port is
asked for; each daemon has its own registry (several may run in one process in tests).
The listener binds loopback unless told otherwise and asks no token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from lakeshore.daemon.code_cache import CodeCache
from lakeshore.daemon.runner import Capture, Outcome, Runner
from lakeshore.model import Invocation

log = logging.getLogger(__name__)

#: Bucket bounds in seconds: from a fast UDF's few milliseconds to a long batch job.
RUN_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class DaemonMetrics:
    """Args:
    version: the running Lakeshore version (``lakeshore_build_info``).
    """

    def __init__(self, *, version: str) -> None:
        self.registry = CollectorRegistry()
        self.in_flight = Gauge(
            "lakeshore_daemon_runs_in_flight", "Runs in progress now.", registry=self.registry
        )
        self.claims = Counter(
            "lakeshore_daemon_claims",
            "Invocations this daemon claimed, by queue.",
            ("queue",),
            registry=self.registry,
        )
        self.run_seconds = Histogram(
            "lakeshore_daemon_run_seconds",
            "Duration of one run (one attempt), by outcome (succeeded, failed, stopped).",
            ("outcome",),
            buckets=RUN_BUCKETS_S,
            registry=self.registry,
        )
        info = Gauge(
            "lakeshore_build_info", "Always 1; the version is the label.", ("version",),
            registry=self.registry,
        )  # fmt: skip
        info.labels(version).set(1)

    def claimed(self, queue: str) -> None:
        self.claims.labels(queue).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MeteredRunner(Runner):
    """A :class:`~lakeshore.daemon.runner.Runner` that counts its runs in ``metrics``."""

    def __init__(
        self,
        base_env: Mapping[str, str],
        metrics: DaemonMetrics,
        *,
        processes: int = 1,
        max_runs_per_process: int | None = None,
        code: CodeCache | None = None,
    ) -> None:
        super().__init__(
            base_env, processes=processes, max_runs_per_process=max_runs_per_process, code=code
        )
        self._metrics = metrics

    async def run(
        self,
        inv: Invocation,
        capture: Capture,
        *,
        env: Mapping[str, str],
        mark: str,
        devices: Mapping[str, str] | None = None,
    ) -> Outcome:
        m = self._metrics
        m.in_flight.inc()
        start = time.perf_counter()
        outcome = "stopped"  # cancelled: stopped, interrupted or timed out
        try:
            result = await super().run(inv, capture, env=env, mark=mark, devices=devices)
            outcome = "succeeded" if result.ok else "failed"
            return result
        finally:
            m.in_flight.dec()
            m.run_seconds.labels(outcome).observe(time.perf_counter() - start)


class MetricsListener:
    """The ``--metrics-port`` listener. Start with :meth:`start`, stop with :meth:`close`."""

    def __init__(self, metrics: DaemonMetrics) -> None:
        self._metrics = metrics
        app = web.Application()
        app.router.add_get("/metrics", self._scrape)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        #: ``http://host:port/metrics`` once started
        self.url = ""
        self._set_up = False

    async def start(self, host: str, port: int) -> str:
        """Listen on ``host:port`` (0: any free port); returns the ``/metrics`` URL."""
        await self._runner.setup()
        self._set_up = True
        await web.TCPSite(self._runner, host, port).start()
        self.url = f"http://{host}:{self._runner.addresses[0][1]}/metrics"
        log.info("serving metrics on %s", self.url)
        return self.url

    async def close(self) -> None:
        """Stop listening (nothing to do if :meth:`start` never got as far as setting up)."""
        if self._set_up:
            await self._runner.cleanup()

    async def _scrape(self, request: web.Request) -> web.Response:
        response = web.Response(body=self._metrics.render())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response
