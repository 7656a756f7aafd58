"""The workers of a snapshot, indexed once per tick, and lost-daemon detection.

Every rule asks the same few questions of the worker rows (whose daemons are these, is a
queue's member idle, who is free to steal); answering them from one pass keeps a tick
linear in the number of workers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta

from lakeshore.controller.decisions import MarkLost, Scope
from lakeshore.controller.snapshot import (
    POOL_LABEL,
    QUEUE_LABEL,
    ControllerSettings,
    Lease,
    QueueKey,
    Snapshot,
)
from lakeshore.model import DEFAULT_QUEUE, Worker, WorkerStatus

#: ``(namespace, scope, name)``: a queue scaled alone, or a pool.
UnitKey = tuple[str, Scope, str]

#: Statuses that promise heartbeats; their absence for ``lost_after_s`` means lost.
_HEARTBEATING = frozenset(
    {WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.RETIRING}
)
#: Statuses that count as a daemon up. A retiring daemon is on its way out, so a unit that
#: still wants it launches a successor rather than waiting for it to leave.
_UP = frozenset({WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY})


def satisfies(labels: dict[str, str], match: dict[str, str]) -> bool:
    """Whether a daemon with ``labels`` may serve a queue with ``match``: every pair equal."""
    return all(labels.get(k) == v for k, v in match.items())


def unit_of(worker: Worker) -> UnitKey | None:
    """The scaling unit owning a managed daemon; None for daemons the controller leaves be."""
    if not worker.managed:
        return None
    if POOL_LABEL in worker.labels:
        return worker.namespace, Scope.POOL, worker.labels[POOL_LABEL]
    if QUEUE_LABEL in worker.labels:
        return worker.namespace, Scope.QUEUE, worker.labels[QUEUE_LABEL]
    return None


class Fleet:
    """Indexes of one snapshot's workers. Read-only after construction."""

    def __init__(self, snapshot: Snapshot, settings: ControllerSettings) -> None:
        now = snapshot.now
        lost_before = now - timedelta(seconds=settings.lost_after_s)
        #: workers found lost this tick with their last heartbeat, by namespace and id
        self.lost: list[tuple[Worker, datetime]] = []
        #: managed daemons up, per owning unit
        self.up: dict[UnitKey, list[Worker]] = defaultdict(list)
        #: managed daemons found lost this tick, per owning unit (candidates for replacing)
        self.lost_managed: dict[UnitKey, list[Worker]] = defaultdict(list)
        #: hand-launched daemons up, per queue they serve
        self.hand: Counter[QueueKey] = Counter()
        #: queues with at least one idle member
        self.idle_member: set[QueueKey] = set()
        #: idle workers per namespace, longest idle first (steal candidates)
        self.idle: dict[str, list[Worker]] = defaultdict(list)
        self._idle_since = snapshot.idle_since
        self._now = now

        up_ids: set[str] = set()
        for w in snapshot.workers:
            # Rows without a heartbeat yet are the registry's launch-timeout business.
            if w.status in _HEARTBEATING and w.last_heartbeat is not None:
                if w.last_heartbeat < lost_before:
                    self.lost.append((w, w.last_heartbeat))
                    unit = unit_of(w)
                    if unit is not None:
                        self.lost_managed[unit].append(w)
                    continue
            if w.status not in _UP:
                continue
            up_ids.add(w.id)
            unit = unit_of(w)
            if unit is not None:
                self.up[unit].append(w)
            if w.status is WorkerStatus.IDLE:
                self.idle[w.namespace].append(w)
            for q in w.queues or [DEFAULT_QUEUE]:
                if unit is None:
                    self.hand[w.namespace, q] += 1
                if w.status is WorkerStatus.IDLE:
                    self.idle_member.add((w.namespace, q))
        self.lost.sort(key=lambda wl: (wl[0].namespace, wl[0].id))
        for idle in self.idle.values():
            idle.sort(key=lambda w: (self.idle_since(w), w.id))
        #: live steal leases by worker id: lapsed ones, and those of daemons no longer up,
        #: lend nothing
        self.leases: dict[str, Lease] = {
            wid: lease
            for wid, lease in snapshot.leases.items()
            if lease.until > now and wid in up_ids
        }
        #: live steal leases per queue
        self.held: Counter[QueueKey] = Counter(
            (lease.namespace, lease.queue) for lease in self.leases.values()
        )

    def idle_since(self, worker: Worker) -> datetime:
        """When ``worker`` became idle; ``now`` when the snapshot does not say."""
        return self._idle_since.get(worker.id, self._now)

    def idle_for_s(self, worker: Worker) -> float:
        """Seconds ``worker`` has been idle at ``now`` (0 when unknown or not idle)."""
        if worker.status is not WorkerStatus.IDLE:
            return 0.0
        return (self._now - self.idle_since(worker)).total_seconds()

    def mark_lost(self, settings: ControllerSettings) -> list[MarkLost]:
        """A :class:`MarkLost` per worker found lost, sorted by namespace and id."""
        out = []
        for w, last_heartbeat in self.lost:
            silent = (self._now - last_heartbeat).total_seconds()
            out.append(
                MarkLost(
                    namespace=w.namespace,
                    worker_id=w.id,
                    reason=(
                        f"{w.name}: no heartbeat for {silent:g}s > lost_after_s "
                        f"{settings.lost_after_s:g}s"
                    ),
                    inputs={
                        "last_heartbeat": last_heartbeat.isoformat(),
                        "silent_s": silent,
                        "lost_after_s": settings.lost_after_s,
                        "status": w.status.value,
                        "managed": w.managed,
                    },
                )
            )
        return out
