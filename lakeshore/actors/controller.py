"""ControllerActor: every tick, a snapshot → the rule book → decisions applied and recorded.

On each :class:`Tick` (sent every ``tick_s`` by :meth:`Runtime.every
<lakeshore.actors.base.Runtime.every>`) it builds a
:class:`~lakeshore.controller.Snapshot` — queue rows from the store, worker rows from the
WorkerRegistry, each queue's backlog from JetStream, and what it remembers between ticks
(:mod:`lakeshore.controller.tracking`: idle clocks, launches not registered yet, steal
leases) — calls :func:`lakeshore.controller.tick`, then applies the decisions in the rule
book's order (:mod:`lakeshore.actors.applier`) and records each applied one as a queue
event (:mod:`lakeshore.controller.records`).

Decisions are idempotent across ticks: a launched daemon counts as launching from the
moment its row exists until it registers, and as up after, so the same backlog is never
launched for twice. A decision that cannot be applied is logged, shown as the unit's
``error`` in the status, and simply decided again by the next tick; the actor never
crashes on one. A tick that cannot read its inputs (NATS unavailable) decides nothing.

It also answers the status route (:class:`Status`) and the controller's part of a pending
job's ``pending_reason`` (:class:`PendingHint`) from the last tick.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import Struct

from lakeshore.actors.applier import Applier, read_loads
from lakeshore.actors.base import Actor, ActorRef
from lakeshore.actors.workers import ListWorkers
from lakeshore.bus.port import Bus
from lakeshore.controller import (
    ControllerSettings,
    Decision,
    GrantSteal,
    Launch,
    MarkLost,
    QueueLoad,
    Retire,
    Scope,
    Snapshot,
    tick,
)
from lakeshore.controller import records as rec
from lakeshore.controller.snapshot import QUEUE_LABEL, QueueKey
from lakeshore.controller.status import UnitKey, pending_hint, unit_rows
from lakeshore.controller.tracking import Observed, Tracker
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    ControllerStatus,
    ElasticityKind,
    LeaseStatus,
    Queue,
    UnitStatus,
    Worker,
    now,
)
from lakeshore.model.resources import DaemonGpus
from lakeshore.store.port import ControllerStore

if TYPE_CHECKING:
    from lakeshore.metrics import ControllerMetrics
    from lakeshore.providers.capacity import Demand

log = logging.getLogger(__name__)


class Tick(Struct, frozen=True):
    """Run one controller tick."""


class Status(Struct, frozen=True):
    """Answer the namespace's :class:`~lakeshore.model.ControllerStatus`."""

    namespace: str


class PendingHint(Struct, frozen=True):
    """Answer ``scaling_up``, ``pool_at_max``, ``steal_delay`` or ``None`` for a queue
    whose pending work no member can take now (see
    :func:`~lakeshore.controller.status.pending_hint`)."""

    namespace: str
    queue: str


class Halt(Struct, frozen=True):
    """Decide nothing from now on (the control plane is stopping its daemons)."""


ControllerMsg = Tick | Status | PendingHint | Halt


class ControllerActor(Actor[ControllerMsg]):
    """Scales daemon fleets and lends idle daemons, one tick at a time.

    Args:
        store: the row store (queue rows are read, queue events appended).
        bus: the control plane's NATS handle (the queues' backlogs).
        workers: the WorkerRegistry.
        launcher: the Launcher.
        settings: the controller's settings.
        metrics: times the ticks and counts the applied decisions (``None``: not).
    """

    name = "controller"

    def __init__(
        self,
        *,
        store: ControllerStore,
        bus: Bus,
        workers: ActorRef[Any],
        launcher: ActorRef[Any],
        settings: ControllerSettings,
        metrics: ControllerMetrics | None = None,
        demand: Demand | None = None,
    ) -> None:
        self._store, self._bus, self._workers = store, bus, workers
        self._demand = demand
        self._metrics = metrics
        self._apply = Applier(store=store, workers=workers, launcher=launcher)
        self._settings = settings
        self._tracker = Tracker()
        self._ticks = 0
        self._tick_at: datetime | None = None
        self._units: dict[UnitKey, UnitStatus] = {}
        self._queues: dict[QueueKey, Queue] = {}
        self._loads: dict[QueueKey, QueueLoad] = {}
        self._names: dict[str, str] = {}
        #: the last tick's failures to apply a decision, per unit
        self._errors: dict[UnitKey, str] = {}
        #: the registry's copy of the steal leases is out of date
        self._leases_dirty = False
        self._halted = False
        self._skipping = False

    async def handle(self, msg: ControllerMsg) -> Any:
        match msg:
            case Tick():
                if self._metrics is not None and not self._halted:
                    with self._metrics.tick.time():
                        return await self._tick()
                return 0 if self._halted else await self._tick()
            case Halt():
                self._halted = True
                return None
            case Status(namespace=ns):
                return self._status(ns)
            case PendingHint(namespace=ns, queue=queue):
                return pending_hint(
                    self._units, self._queues.get((ns, queue)), self._loads.get((ns, queue))
                )

    async def _gpu_work(
        self, queues: list[Queue], loads: dict[QueueKey, QueueLoad]
    ) -> tuple[dict[QueueKey, QueueLoad], dict[tuple[str, str], DaemonGpus]]:
        """The loads with what the pending work of each elastic queue asks of GPUs, and
        what each daemon of those queues' providers brings (read only for queues with work
        pending: most ticks read nothing more)."""
        gpus: dict[tuple[str, str], DaemonGpus] = {}
        if self._demand is None:
            return loads, gpus
        out = dict(loads)
        for q in queues:
            key = (q.namespace, q.name)
            load = loads.get(key)
            if load is None or not load.pending or q.elasticity.kind is ElasticityKind.FIXED:
                continue
            asks = await self._demand.asks(q.namespace, q.name)
            if not asks:
                continue
            out[key] = msgspec.structs.replace(load, gpu_asks=asks)
            provider = (q.namespace, q.elasticity.provider)
            if provider not in gpus:
                gpus[provider] = await self._demand.per_daemon(*provider)
        return out, gpus

    async def _tick(self) -> int:
        """One tick; answers how many decisions were applied."""
        at = now()
        try:
            queues = await self._store.all_queues()
            rows: list[Worker] = await self._workers.ask(ListWorkers())
            loads = await read_loads(self._bus, _needing_load(queues, rows), at)
            loads, gpus = await self._gpu_work(queues, loads)
        except LakeshoreError as e:
            if not self._skipping:
                log.warning("controller ticks skipped until their inputs can be read: %s", e)
            self._skipping = True
            return 0
        except Exception:
            log.exception("controller tick skipped: cannot read its inputs")
            return 0
        if self._skipping:
            log.info("controller ticking again")
            self._skipping = False
        seen = self._tracker.observe(rows, at)
        leases_ended = self._tracker.prune(seen.workers, loads, at)
        snapshot = Snapshot(
            now=at,
            queues=queues,
            workers=seen.workers,
            loads=loads,
            launching=seen.launching,
            daemon_gpus=gpus,
            leases=dict(self._tracker.leases),
            idle_since=seen.idle_since,
        )
        try:
            result = tick(snapshot, self._settings)
        except Exception:
            log.exception("controller: the rule book failed on this tick's snapshot")
            return 0
        self._names = {w.id: w.name for w in rows}
        self._leases_dirty |= leases_ended
        failed_before, self._errors = self._errors, {}
        launched: Counter[QueueKey] = Counter()
        applied = 0
        for d in result.decisions:
            try:
                applied += await self._apply_one(d, seen, launched)
                if self._metrics is not None:
                    self._metrics.acted(d)
            except Exception as e:
                self._failed(d, e, failed_before)
        if self._leases_dirty:
            try:
                await self._apply.set_leases(self._tracker.grants())
                self._leases_dirty = False
            except LakeshoreError as e:
                log.warning("steal leases not delivered to the registry (retried): %s", e)
        self._queues = {(q.namespace, q.name): q for q in queues}
        self._loads = loads
        self._units = unit_rows(
            result.explanations, self._queues, launched, self._errors, snapshot.workers
        )
        self._ticks += 1
        self._tick_at = at
        return applied

    async def _apply_one(self, d: Decision, seen: Observed, launched: Counter[QueueKey]) -> int:
        """Apply one decision and record it; answers 1 if anything changed, else 0."""
        match d:
            case MarkLost():
                # The registry records ``daemon_lost`` itself, with this decision's reason.
                return int(await self._apply.mark_lost(d) is not None)
            case Retire():
                worker = await self._apply.retire(d)
                await self._apply.record(rec.retired(d, worker))
            case GrantSteal():
                thief = next((w for w in seen.workers if w.id == d.worker_id), None)
                await self._apply.record([rec.steal_granted(d, thief)])
                self._tracker.grant(d)
                self._leases_dirty = True
            case Launch():
                rows = await self._apply.launch(d)
                launched[d.namespace, d.queue] += len(rows)
                lost = self._replaced(d, seen)
                self._tracker.replaced(w.id for w in lost)
                await self._apply.record(rec.launched(d, rows, lost))
                log.info("launched %d managed daemon(s) for %s/%s", len(rows), d.namespace, d.queue)
        return 1

    def _replaced(self, d: Launch, seen: Observed) -> list[Worker]:
        """The lost managed daemons this launch replaces, at most one per new daemon: the
        ones the rule book found lost this tick (``d.replaces``), then the ones the
        registry marked lost since the last tick (it usually sees a death first)."""
        found = [w for w in seen.workers if w.id in d.replaces]
        marked = [
            w for w in seen.newly_lost.get(_unit_of(d), []) if not self._tracker.was_replaced(w.id)
        ]
        return (found + marked)[: d.count]

    def _failed(self, d: Decision, e: Exception, before: dict[UnitKey, str]) -> None:
        unit = _unit_of(d)
        text = e.message if isinstance(e, LakeshoreError) else f"{type(e).__name__}: {e}"
        if before.get(unit) != text and self._errors.get(unit) != text:
            # Logged once per distinct failure: it is retried every tick.
            what = f"{type(d).__name__.lower()} for {'/'.join(unit[::2])}"
            if isinstance(e, LakeshoreError):
                log.warning("controller: %s not applied (retried next tick): %s", what, text)
            else:
                log.exception("controller: %s failed (retried next tick)", what)
        self._errors[unit] = text

    def _status(self, ns: str) -> ControllerStatus:
        units = sorted(
            (u for (uns, _, _), u in self._units.items() if uns == ns),
            key=lambda u: (u.scope != Scope.QUEUE, u.name),
        )
        leases = sorted(
            (
                LeaseStatus(
                    worker_id=wid,
                    worker=self._names.get(wid, wid),
                    queue=lease.queue,
                    until=lease.until,
                )
                for wid, lease in self._tracker.leases.items()
                if lease.namespace == ns
            ),
            key=lambda lease: (lease.queue, lease.worker),
        )
        return ControllerStatus(
            namespace=ns, ticks=self._ticks, tick_at=self._tick_at, units=units, leases=leases
        )


def _needing_load(queues: list[Queue], workers: list[Worker]) -> list[Queue]:
    """The queues whose backlog the rule book reads: every queue but a ``fixed`` one that
    neither steals nor has managed daemons (those are decided without it)."""
    managed = {(w.namespace, w.labels.get(QUEUE_LABEL)) for w in workers if w.managed}
    return [
        q
        for q in queues
        if q.elasticity.kind is not ElasticityKind.FIXED
        or q.elasticity.steal_delay_s is not None
        or (q.namespace, q.name) in managed
    ]


def _unit_of(d: Decision) -> UnitKey:
    """The status row a decision's failure shows on."""
    match d:
        case Launch(pool=str(pool)) | Retire(pool=str(pool)):
            return d.namespace, Scope.POOL, pool
        case Launch(queue=queue) | GrantSteal(queue=queue):
            return d.namespace, Scope.QUEUE, queue
        case Retire(queue=str(queue)):
            return d.namespace, Scope.QUEUE, queue
    return d.namespace, Scope.QUEUE, ""
