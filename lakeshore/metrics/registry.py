"""One control plane's metrics: its own registry, the event counters, the scrape gauges.

There is no global registry: :class:`PlaneMetrics` is built by the composition root
(:mod:`lakeshore.plane`) and handed to what observes it, so two planes in one process
(the tests) never share a series.
"""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from lakeshore.metrics.controller import ControllerMetrics
from lakeshore.metrics.gateway import GatewayMetrics
from lakeshore.metrics.gauges import QueueGauges
from lakeshore.metrics.http_metrics import HttpMetrics
from lakeshore.metrics.invocations import InvocationMetrics
from lakeshore.metrics.view import NamespaceView

#: The ``Content-Type`` of :meth:`PlaneMetrics.render`'s text (Prometheus text 0.0.4).
CONTENT_TYPE = CONTENT_TYPE_LATEST


class PlaneMetrics:
    """Args:
    version: the running Lakeshore version (``lakeshore_build_info``).
    """

    def __init__(self, *, version: str) -> None:
        self.registry = CollectorRegistry()
        self.invocations = InvocationMetrics(self.registry)
        self.controller = ControllerMetrics(self.registry)
        self.http = HttpMetrics(self.registry)
        self.gateway = GatewayMetrics(self.registry)
        info = Gauge(
            "lakeshore_build_info", "Always 1; the version is the label.", ("version",),
            registry=self.registry,
        )  # fmt: skip
        info.labels(version).set(1)
        self._gauges: QueueGauges | None = None

    def watch(self, gauges: QueueGauges) -> None:
        """Report the queue and daemon gauges (built once the actors they ask exist; a
        new leadership term's replace the last term's)."""
        if self._gauges is not None:
            self.registry.unregister(self._gauges)
        self.registry.register(gauges)
        self._gauges = gauges

    async def render(self, namespaces: Collection[str] | None = None) -> bytes:
        """The metrics now, in the Prometheus text format.

        Args:
            namespaces: show only these namespaces' series and the plane-wide ones
                (:mod:`lakeshore.metrics.view`: an org's view); ``None``: every series.

        Raises:
            LakeshoreError: the gauges could not be read (NATS, an actor).
        """
        if self._gauges is not None:
            await self._gauges.refresh()
        if namespaces is None:
            return generate_latest(self.registry)
        return generate_latest(NamespaceView(self.registry, frozenset(namespaces)))
