"""What the controller remembers between ticks: idle clocks, statuses seen, steal leases.

The rule book is a pure function of one snapshot; a few of its inputs are facts about
*time* that no single row carries, so the ControllerActor keeps them here and folds them
into each snapshot:

* ``idle_since`` — a worker's status turning ``idle`` is watched tick to tick (the row's
  ``last_heartbeat`` moves every beat); a worker first seen idle is idle since that tick,
  so nothing is retired for idleness the actor has not watched for the full period;
* ``launching`` — a managed daemon whose row is still ``starting`` has been launched and
  has not registered: it is counted as *launching* for the queue its
  ``lakeshore.io/queue`` label names, and left out of the snapshot's workers. The rule
  book counts both alike, so this changes no decision, but the status shows the daemons
  as launching until they register, and it survives a control-plane restart (it is read
  from the rows, not from memory);
* leases — the steal leases granted and still live; a lease ends when it lapses, when
  its daemon is no longer up, or when the queue it was lent to has nothing pending;
* managed daemons newly lost since the last tick, so that the launch replacing them can
  be recorded as ``daemon_replaced`` even when the registry marked them lost first.

Pure: the caller passes ``now``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime

from msgspec import Struct

from lakeshore.controller.decisions import GrantSteal, Scope
from lakeshore.controller.fleet import unit_of
from lakeshore.controller.snapshot import QUEUE_LABEL, Lease, QueueKey, QueueLoad
from lakeshore.model import StealGrant, Worker, WorkerStatus

#: ``(namespace, scope, name)`` of a scaling unit.
UnitKey = tuple[str, Scope, str]

_UP = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})
_GONE = frozenset({WorkerStatus.LOST, WorkerStatus.STOPPED})


class Observed(Struct, frozen=True, kw_only=True):
    """One tick's view of the worker rows, ready for the snapshot."""

    #: the rows the rule book sees (managed rows still ``starting`` left out)
    workers: list[Worker]
    #: managed daemons launched and not registered yet, per queue launched for
    launching: dict[QueueKey, int]
    #: when each idle worker became idle
    idle_since: dict[str, datetime]
    #: managed daemons lost since the last tick, per owning unit
    newly_lost: dict[UnitKey, list[Worker]]


class Tracker:
    """The controller's memory between ticks. Owned by one ControllerActor."""

    def __init__(self) -> None:
        self._idle_since: dict[str, datetime] = {}
        self._status: dict[str, WorkerStatus] = {}
        self._replaced: set[str] = set()
        #: live steal leases by worker id
        self.leases: dict[str, Lease] = {}

    def observe(self, rows: Iterable[Worker], now: datetime) -> Observed:
        """Fold this tick's worker rows into the memory and answer the snapshot's view."""
        workers: list[Worker] = []
        launching: Counter[QueueKey] = Counter()
        newly_lost: dict[UnitKey, list[Worker]] = defaultdict(list)
        status: dict[str, WorkerStatus] = {}
        for w in rows:
            status[w.id] = w.status
            before = self._status.get(w.id)
            unit = unit_of(w)
            launched_for = w.labels.get(QUEUE_LABEL)
            if w.status is WorkerStatus.STARTING and unit is not None and launched_for:
                launching[w.namespace, launched_for] += 1
                continue
            workers.append(w)
            if w.status is WorkerStatus.IDLE:
                self._idle_since.setdefault(w.id, now)
            else:
                self._idle_since.pop(w.id, None)
            fresh = before is not None and before not in _GONE and w.id not in self._replaced
            if unit is not None and w.status is WorkerStatus.LOST and fresh:
                newly_lost[unit].append(w)
        self._status = status
        self._replaced = {wid for wid in self._replaced if wid in status}
        self._idle_since = {wid: t for wid, t in self._idle_since.items() if wid in status}
        return Observed(
            workers=workers,
            launching=dict(launching),
            idle_since=dict(self._idle_since),
            newly_lost=dict(newly_lost),
        )

    def prune(
        self, workers: Iterable[Worker], loads: Mapping[QueueKey, QueueLoad], now: datetime
    ) -> bool:
        """End the leases that lapsed, whose daemon is not up, or whose backlog is gone.

        Returns:
            Whether any lease ended.
        """
        up = {w.id for w in workers if w.status in _UP}
        kept = {
            wid: lease
            for wid, lease in self.leases.items()
            if lease.until > now
            and wid in up
            and (load := loads.get((lease.namespace, lease.queue))) is not None
            and load.pending > 0
        }
        changed = kept.keys() != self.leases.keys()
        self.leases = kept
        return changed

    def replaced(self, worker_ids: Iterable[str]) -> None:
        """Note lost daemons whose replacement was recorded (never recorded twice)."""
        self._replaced.update(worker_ids)

    def was_replaced(self, worker_id: str) -> bool:
        """Whether a lost daemon's replacement was recorded already."""
        return worker_id in self._replaced

    def grant(self, g: GrantSteal) -> None:
        """Hold a lease just granted."""
        self.leases[g.worker_id] = Lease(namespace=g.namespace, queue=g.queue, until=g.until)

    def grants(self) -> dict[str, list[StealGrant]]:
        """The live leases as the WorkerRegistry delivers them in heartbeat replies."""
        return {
            wid: [StealGrant(queue=lease.queue, until=lease.until)]
            for wid, lease in self.leases.items()
        }
