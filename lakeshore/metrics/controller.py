"""The controller's tick duration and the decisions it applied, by kind."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Histogram

#: Bucket bounds in seconds of one tick (reads of every queue's backlog included).
TICK_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class ControllerMetrics:
    """Args:
    registry: where the histogram and counter are registered.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tick = Histogram(
            "lakeshore_controller_tick_seconds",
            "Duration of one controller tick: read, decide, apply.",
            buckets=TICK_BUCKETS_S,
            registry=registry,
        )
        self.actions = Counter(
            "lakeshore_controller_actions",
            "Decisions the controller applied, by kind.",
            ("kind",),
            registry=registry,
        )

    def acted(self, decision: object) -> None:
        """Count one applied decision under its snake-cased class name (``grant_steal``)."""
        self.actions.labels(kind_of(decision)).inc()


def kind_of(decision: object) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(decision).__name__).lower()
