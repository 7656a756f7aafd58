"""What one controller tick sees: rows, loads, launches in flight and leases, at ``now``.

The ControllerActor builds a :class:`Snapshot` from the queue rows, the WorkerRegistry's
rows and the JetStream consumer counts, then calls :func:`lakeshore.controller.tick`. The
rule book reads nothing else: no clock, no I/O (DESIGN.md, rule 7).

Ownership of daemons is carried by labels, so it survives a control-plane restart:

* a controller-launched daemon has ``managed=True`` and the label :data:`QUEUE_LABEL`
  naming the queue it was launched for;
* a pool daemon also carries :data:`POOL_LABEL`; it belongs to the pool, and the queue
  label only records which member's share it was launched to fill.

Hand-launched daemons (``managed=False``) and managed daemons without these labels are
never launched, retired or replaced by the controller; ``burst`` counts the former as its
baseline.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import Meta, Struct

from lakeshore.model import Queue, Worker
from lakeshore.model.resources import DaemonGpus

#: Label naming the queue a managed daemon was launched for.
QUEUE_LABEL = "lakeshore.io/queue"
#: Label naming the pool a managed pool daemon belongs to.
POOL_LABEL = "lakeshore.io/pool"

#: ``(namespace, queue)``.
QueueKey = tuple[str, str]


class QueueLoad(Struct, frozen=True, kw_only=True):
    """A queue's backlog at the snapshot's ``now`` (from JetStream consumer info)."""

    namespace: str
    queue: str
    #: invocations queued and not yet delivered
    pending: int = 0
    #: invocations delivered and not yet acknowledged
    running: int = 0
    #: seconds the oldest pending invocation has waited at ``now``; None: nothing pending
    oldest_pending_age_s: float | None = None
    #: what its pending invocations ask of GPUs: ``(gpus, gpu_type, how many)`` for each
    #: request of at least one (from the history: it may trail ``pending`` a moment)
    gpu_asks: tuple[tuple[int, str | None, int], ...] = ()


class Lease(Struct, frozen=True, kw_only=True):
    """A steal lease a daemon holds: it may pull from ``queue`` after its own until ``until``."""

    namespace: str
    queue: str
    until: datetime


class Snapshot(Struct, frozen=True, kw_only=True):
    """Everything one tick decides from. Built by the ControllerActor; never mutated.

    An in-process value, not a wire type: its maps are keyed by tuples. What a decision
    was computed from travels in the decision's own ``inputs``.
    """

    #: the tick's time; every age and lease expiry is judged against it
    now: datetime
    #: every queue row the controller scales, in any order and any namespace
    queues: list[Queue]
    #: every worker row, including lost and stopped ones
    workers: list[Worker]
    #: backlog per queue; a queue without an entry has an empty backlog
    loads: dict[QueueKey, QueueLoad] = {}
    #: the GPUs each daemon of a provider brings, by ``(namespace, provider)`` (absent: none)
    daemon_gpus: dict[tuple[str, str], DaemonGpus] = {}
    #: launches requested whose worker row does not exist yet, per ``(namespace, queue)``
    #: the launch was for (a pool launch counts under its member queue). They count as
    #: up, so the same backlog is never launched twice across ticks.
    launching: dict[QueueKey, int] = {}
    #: steal leases granted by earlier ticks, by worker id; lapsed ones are ignored
    leases: dict[str, Lease] = {}
    #: when each currently idle worker became idle, by worker id. ``Worker`` has no such
    #: field and ``last_heartbeat`` moves every beat, so the actor tracks the transition.
    #: An idle worker without an entry is treated as idle since ``now``: it is not
    #: retired for idleness until the actor has watched it idle for the full period.
    idle_since: dict[str, datetime] = {}

    def gpus_of(self, queue: Queue) -> DaemonGpus:
        """The GPUs each daemon the queue's provider launches brings."""
        return self.daemon_gpus.get((queue.namespace, queue.elasticity.provider), DaemonGpus())

    def load(self, namespace: str, queue: str) -> QueueLoad:
        """The backlog of a queue (empty when the snapshot has none)."""
        found = self.loads.get((namespace, queue))
        return found if found is not None else QueueLoad(namespace=namespace, queue=queue)


class ControllerSettings(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The controller's own numbers (the queue's numbers are on its elasticity object)."""

    #: period of ticks (seconds)
    tick_s: Annotated[float, Meta(gt=0)] = 1.0
    #: most launches per scaling unit (a queue, or a whole pool) per tick
    max_surge: Annotated[int, Meta(ge=1)] = 4
    #: a live worker without a heartbeat for longer than this is lost (seconds)
    lost_after_s: Annotated[float, Meta(gt=0)] = 10.0
    #: a steal lease lasts this many ticks (``steal_lease_ticks * tick_s`` seconds)
    steal_lease_ticks: Annotated[int, Meta(ge=1)] = 3
