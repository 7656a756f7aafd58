"""Per-queue and per-daemon gauges, read when Prometheus scrapes.

The values are not kept between scrapes: :meth:`QueueGauges.refresh` reads them (one
query of the queue rows, one ask of the registry, and the backlog of every queue from
JetStream as the controller reads it, at most 64 queues at once), then
:meth:`QueueGauges.collect` turns that snapshot into metric families. Nothing is asked of
DuckDB per queue, so a scrape costs about the same as one controller tick.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lakeshore.actors.applier import read_loads
from lakeshore.actors.base import ActorRef
from lakeshore.actors.workers import ListWorkers
from lakeshore.bus.port import Bus
from lakeshore.metrics.labels import OTHER, QueueLabels
from lakeshore.model import Worker, WorkerStatus, now
from lakeshore.store.port import QueueRows

Key = tuple[str, str]


@dataclass(slots=True)
class _Row:
    """One series' values (a queue, or the sum of several)."""

    pending: int = 0
    running: int = 0
    oldest_age_s: float | None = None
    live: int = 0
    busy: int = 0
    gpus: int = 0
    gpus_used: int = 0

    def add(self, other: _Row) -> None:
        self.pending += other.pending
        self.running += other.running
        self.live += other.live
        self.busy += other.busy
        self.gpus += other.gpus
        self.gpus_used += other.gpus_used
        if other.oldest_age_s is not None:
            self.oldest_age_s = max(self.oldest_age_s or 0.0, other.oldest_age_s)


@dataclass(slots=True)
class _Snapshot:
    queues: dict[Key, _Row] = field(default_factory=dict)
    daemons: Counter[tuple[str, str]] = field(default_factory=Counter)


class QueueGauges(Collector):
    """Args:
    store: the queue rows (one query per scrape).
    bus: the queues' backlogs.
    workers: the WorkerRegistry (daemons by status, queue members).
    labels: how many queues keep a label of their own.
    """

    def __init__(
        self, *, store: QueueRows, bus: Bus, workers: ActorRef[Any], labels: QueueLabels
    ) -> None:
        self._store = store
        self._bus, self._workers, self._labels = bus, workers, labels
        self._snapshot = _Snapshot()
        # Scrapes that arrive together share one read.
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Read the current values; :meth:`collect` reports them until the next refresh.

        Raises:
            LakeshoreError: NATS or an actor did not answer (the scrape fails: a gap in
                the graphs, not a zero).
        """
        async with self._lock:
            queues = await self._store.all_queues()
            workers: list[Worker] = await self._workers.ask(ListWorkers())
            loads = await read_loads(self._bus, queues, now())
            snap = _Snapshot()
            for key, load in loads.items():
                snap.queues[key] = _Row(
                    pending=load.pending,
                    running=load.running,
                    oldest_age_s=load.oldest_pending_age_s,
                )
            for w in workers:
                snap.daemons[w.namespace, w.status.value] += 1
                if w.status in (WorkerStatus.LOST, WorkerStatus.STOPPED):
                    continue
                for q in w.queues:
                    row = snap.queues.get((w.namespace, q))
                    if row is not None:
                        row.live += 1
                        row.busy += w.status is WorkerStatus.BUSY
                        if (r := w.resources) is not None:
                            row.gpus += len(r.total.gpus)
                            row.gpus_used += len(r.total.gpus) - len(r.free.gpus)
            self._snapshot = snap

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot
        keep_queue = self._labels.keeps_queue
        labels = ["namespace", "queue"] if keep_queue else ["namespace"]
        families = {
            "pending": GaugeMetricFamily(
                "lakeshore_queue_pending",
                "Invocations stored and not yet delivered.",
                labels=labels,
            ),
            "running": GaugeMetricFamily(
                "lakeshore_queue_running", "Invocations delivered and not yet acked.", labels=labels
            ),
            "age": GaugeMetricFamily(
                "lakeshore_queue_oldest_pending_age_seconds",
                "Age of the oldest pending invocation (0: none pending).",
                labels=labels,
            ),
            "util": GaugeMetricFamily(
                "lakeshore_queue_utilization",
                "Busy member daemons (at most the running invocations) over live member daemons "
                "(0: no members).",
                labels=labels,
            ),
            "gpus": GaugeMetricFamily(
                "lakeshore_queue_gpus",
                "GPUs of the live member daemons (a daemon of two queues counts in both).",
                labels=labels,
            ),
            "gpus_used": GaugeMetricFamily(
                "lakeshore_queue_gpus_used",
                "GPUs of the live member daemons held by a run now.",
                labels=labels,
            ),
        }
        for values, row in self._capped(snap.queues).items():
            families["pending"].add_metric(values, row.pending)
            families["running"].add_metric(values, row.running)
            families["age"].add_metric(values, row.oldest_age_s or 0.0)
            families["util"].add_metric(values, _utilization(row))
            families["gpus"].add_metric(values, row.gpus)
            families["gpus_used"].add_metric(values, row.gpus_used)
        yield from families.values()
        daemons = GaugeMetricFamily(
            "lakeshore_daemons", "Daemon rows by status.", labels=["namespace", "status"]
        )
        for (ns, status), n in sorted(snap.daemons.items()):
            daemons.add_metric([ns, status], n)
        yield daemons

    def _capped(self, queues: dict[Key, _Row]) -> dict[tuple[str, ...], _Row]:
        named = self._labels.named((k, r.pending + r.running) for k, r in queues.items())
        out: dict[tuple[str, ...], _Row] = {}
        for (ns, q), row in sorted(queues.items()):
            if not self._labels.keeps_queue:
                values: tuple[str, ...] = (ns,)
            else:
                values = (ns, q) if (ns, q) in named else (ns, OTHER)
            out.setdefault(values, _Row()).add(row)
        return out


def _utilization(row: _Row) -> float:
    """As ``queues stats`` has it: busy daemons bounded by the running invocations of the
    same read (a heartbeat saying busy can outlive the run it was about)."""
    return min(row.busy, row.running) / row.live if row.live else 0.0
