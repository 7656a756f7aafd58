"""The NATS gateway's refusals: requests dropped because their reply lay outside the
asker's inbox (:mod:`lakeshore.security.replies`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class GatewayMetrics:
    """Args:
    registry: where the counter is registered.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped_replies = Counter(
            "lakeshore_gateway_replies_dropped",
            "NATS requests dropped unanswered because their reply subject was not under the "
            "asker's own inbox, by route (register, heartbeat, submit, result).",
            ("route",),
            registry=registry,
        )

    def dropped(self, route: str) -> None:
        self.dropped_replies.labels(route).inc()
