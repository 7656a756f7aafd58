"""Invocation counters and timing histograms, observed as the Recorder fences events.

The Recorder is the one place every lifecycle event passes through once, in order, after
fencing: a stale completion is counted as stale, never as an outcome. Times come from the
events themselves (the server's clock) and from the invocation id, a UUIDv7 whose first
48 bits are its submission time in milliseconds.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from lakeshore.fencing import Fenced, Key
from lakeshore.ids import submitted_at
from lakeshore.model import EventType

#: Bucket bounds in seconds: from a fast UDF's few milliseconds to a long batch job.
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Start times kept for invocations still running (oldest forgotten first): bounds memory
#: when completions never come (a crash between start and end loses one run-time sample).
MAX_RUNNING = 100_000
_TERMINAL = {EventType.SUCCEEDED, EventType.FAILED, EventType.CANCELLED, EventType.DROPPED}
_LE = [*map(floatToGoString, BUCKETS_S), "+Inf"]


class _Histogram:
    """A histogram's counts as plain numbers: an observation is a bisection and two
    additions. (``prometheus_client``'s ``Histogram`` takes a lock for its sum and one for
    its bucket at each observation: three per run, a tenth of the Recorder's time in a
    drain.) The event loop's thread alone observes and collects."""

    __slots__ = ("name", "doc", "counts", "sum")

    def __init__(self, name: str, doc: str) -> None:
        self.name, self.doc = name, doc
        self.counts = [0] * (len(BUCKETS_S) + 1)  # the last one: over every bound
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS_S, seconds)] += 1  # a bound holds values <= it
        self.sum += seconds

    def family(self) -> HistogramMetricFamily:
        total, buckets = 0, []
        for le, n in zip(_LE, self.counts, strict=True):
            total += n
            buckets.append((le, total))
        return HistogramMetricFamily(self.name, self.doc, buckets=buckets, sum_value=self.sum)


class _Histograms(Collector):
    def __init__(self, *histograms: _Histogram) -> None:
        self._histograms = histograms

    def collect(self) -> Iterator[Metric]:
        for h in self._histograms:
            yield h.family()


class InvocationMetrics:
    """Args:
    registry: where the counters and histograms are registered.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"lakeshore_{name}", doc, labels, registry=registry)

        def histogram(name: str, doc: str) -> _Histogram:
            return _Histogram(f"lakeshore_{name}", doc)

        self.submitted = counter("invocations_submitted", "Invocations admitted to a queue.")
        self.finished = counter(
            "invocations_finished", "Invocations that reached an end, by outcome.", ("outcome",)
        )
        self.redelivered = counter(
            "invocations_redelivered", "Claims of an invocation after its first (epoch > 1)."
        )
        self.stale = counter(
            "completions_stale", "Completions of superseded attempts, recorded but not counted."
        )
        self.deduplicated = counter(
            "submits_deduplicated", "Submitted invocations whose idempotency key was known."
        )
        self.wait = histogram(
            "invocation_wait_seconds", "From submission to the start of the first run."
        )
        self.run = histogram(
            "invocation_run_seconds", "From the start of the accepted attempt to its end."
        )
        self.end_to_end = histogram(
            "invocation_end_to_end_seconds", "From submission to the invocation's end."
        )
        registry.register(_Histograms(self.wait, self.run, self.end_to_end))
        for outcome in _TERMINAL:
            self.finished.labels(outcome.value)
        self._started: OrderedDict[Key, datetime] = OrderedDict()

    def observe(self, fenced: Fenced) -> None:
        """Count a fenced batch (the Recorder calls it once per batch, before appending):
        each counter moves once per batch, by what the batch holds."""
        counts: Tally[EventType] = Tally()
        redelivered = 0
        for ev in fenced.events:
            key = (ev.namespace, ev.invocation_id)
            counts[ev.type] += 1
            match ev.type:
                case EventType.STARTED:
                    if (ev.epoch or 0) > 1:
                        redelivered += 1
                    elif at := submitted_at(ev.invocation_id):
                        self.wait.observe(max(0.0, (ev.ts - at).total_seconds()))
                    self._started[key] = ev.ts
                    self._started.move_to_end(key)
                    while len(self._started) > MAX_RUNNING:
                        self._started.popitem(last=False)
                case t if t in _TERMINAL:
                    self._ended(key, ev.ts)
        for type_, n in counts.items():
            if type_ is EventType.SUBMITTED:
                self.submitted.inc(n)
            elif type_ is EventType.STALE:
                self.stale.inc(n)
            elif type_ in _TERMINAL:
                self.finished.labels(type_.value).inc(n)
        if redelivered:
            self.redelivered.inc(redelivered)

    def _ended(self, key: Key, ts: datetime) -> None:
        started = self._started.pop(key, None)
        if started is not None:
            self.run.observe(max(0.0, (ts - started).total_seconds()))
        if at := submitted_at(key[1]):
            self.end_to_end.observe(max(0.0, (ts - at).total_seconds()))
