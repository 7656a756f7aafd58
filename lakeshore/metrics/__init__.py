"""Prometheus metrics of the control plane (``GET /metrics``)."""

from lakeshore.metrics.controller import ControllerMetrics
from lakeshore.metrics.gauges import QueueGauges
from lakeshore.metrics.http_metrics import HttpMetrics
from lakeshore.metrics.invocations import InvocationMetrics
from lakeshore.metrics.labels import OTHER, QueueLabels
from lakeshore.metrics.registry import CONTENT_TYPE, PlaneMetrics

__all__ = [
    "CONTENT_TYPE",
    "OTHER",
    "ControllerMetrics",
    "HttpMetrics",
    "InvocationMetrics",
    "PlaneMetrics",
    "QueueGauges",
    "QueueLabels",
]
