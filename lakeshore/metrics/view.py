"""What one org's token sees of the plane's metrics.

A series labelled with a ``namespace`` is shown only to the org that namespace belongs to
(the queue, daemon and worker series all carry it). A series without one is shown to every
token only when it describes the control plane itself (:data:`PLANE_WIDE`): totals summed
over every org's work (invocations, HTTP requests, the controller's launches) would tell
one org how busy the others are, so they stay the admin's, like any family added later
until it is labelled or listed here.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

#: The label that says whose a series is.
NAMESPACE = "namespace"
#: Families without a namespace label that every token sees (family names: a counter's
#: without ``_total``, a histogram's without ``_bucket`` / ``_count`` / ``_sum``).
PLANE_WIDE = frozenset({"lakeshore_build_info", "lakeshore_controller_tick_seconds"})


class NamespaceView(Collector):
    """The families of ``source`` restricted to the series of ``namespaces``.

    Args:
        source: the plane's registry.
        namespaces: the namespaces of the caller's org.
    """

    def __init__(self, source: Collector, namespaces: frozenset[str]) -> None:
        self._source, self._namespaces = source, namespaces

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [s for s in family.samples if self._shows(family.name, s.labels)]
            if kept.samples:
                yield kept

    def _shows(self, family: str, labels: dict[str, str]) -> bool:
        if NAMESPACE in labels:
            return labels[NAMESPACE] in self._namespaces
        return family in PLANE_WIDE
