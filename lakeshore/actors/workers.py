"""WorkerRegistry: the one owner of worker rows — registration, membership and liveness.

``Worker.queues`` is the source of truth of membership; the empty array is the default
queue. The explicit add/remove edits reject ``default`` (the empty array is the contract),
while the membership lookup also accepts a literal ``default`` entry.

Rows live in memory (every ask is answered without the store) and are written through:
registration, membership, retirement, a lost or stopped worker — every change of state —
at once, and so is a heartbeat that changes ``status``, what it runs or what it has free. A
heartbeat that only proves the worker alive is not written: liveness is judged in memory, and the
``last_heartbeat`` of every such worker is written in one statement at the first
:class:`Sweep` ``persist_every_s`` after the previous one (and when the registry stops), so a
thousand daemons cost one write per period instead of one per beat.

It enforces ``daemons_per_org`` (:mod:`lakeshore.quotas`) where a worker comes to count:
a registration of a worker that was not starting or running, and a launch's rows. The org
of each namespace is read from the store once, then kept (a namespace never changes org).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import msgspec
from msgspec import Struct

from lakeshore import quotas
from lakeshore.actors.base import Actor, Later
from lakeshore.errors import AlreadyExists, Invalid, LakeshoreError, WorkerNotFound
from lakeshore.model import (
    DEFAULT_QUEUE,
    Capacity,
    ClaimMark,
    Heartbeat,
    HeartbeatReply,
    StealGrant,
    Worker,
    WorkerRegister,
    WorkerResources,
    WorkerStatus,
    is_queued,
    now,
    serves,
    validate_name,
)
from lakeshore.quotas import DEFAULT_QUOTAS, Quotas
from lakeshore.store.port import RegistryStore

log = logging.getLogger(__name__)


class Register(Struct, frozen=True):
    worker: WorkerRegister


class Beat(Struct, frozen=True):
    heartbeat: Heartbeat


class EditQueues(Struct, frozen=True):
    namespace: str
    ref: str
    add: list[str]
    remove: list[str]
    actor: str | None


class SetLabels(Struct, frozen=True):
    """Replace a worker's labels; its daemon keeps running (heartbeats do not carry them)."""

    namespace: str
    ref: str
    labels: dict[str, str]


class Members(Struct, frozen=True):
    """The workers pulling from a queue now (not stopped; lost ones may come back)."""

    namespace: str
    queue: str


class Scrub(Struct, frozen=True):
    """Remove a queue from every ``Worker.queues``; answers the workers changed."""

    namespace: str
    queue: str


class RetireWorker(Struct, frozen=True):
    namespace: str
    ref: str


class Sweep(Struct, frozen=True):
    """Mark workers without a heartbeat for ``lost_after_s`` as lost (sent every tick)."""


class ListWorkers(Struct, frozen=True):
    """Every worker row (for the controller and the launch progress)."""

    namespace: str | None = None


class Prepare(Struct, frozen=True):
    """Create the rows of daemons about to be launched (status ``starting``).

    All or nothing: a name held by a live worker (anything but ``stopped`` or ``lost``)
    refuses the whole batch with 409; a dead worker's row of that name is replaced. Over
    ``daemons_per_org`` the batch is refused with 429, unless ``partial``: then the first
    rows that fit are made (the answer has only those), and 429 only when none does.
    """

    namespace: str
    workers: list[Worker]
    partial: bool = False


class SetLeases(Struct, frozen=True):
    """Replace the steal leases delivered in heartbeat replies (from the controller).

    ``leases`` maps a worker id to its grants; a grant is delivered until its ``until``.
    """

    leases: dict[str, list[StealGrant]]


class MarkWorkerLost(Struct, frozen=True):
    """Mark one worker lost for the controller, with its reason.

    Judged again by the registry's own clock and ``lost_after_s``, so it is idempotent
    with :class:`Sweep` and loses no worker that beat since the controller looked:
    answers the lost row, or ``None`` when the worker is not (or no longer) overdue.
    """

    namespace: str
    worker_id: str
    #: merged into the ``daemon_lost`` events' detail (the controller's reason and inputs)
    detail: dict[str, Any]


class Exited(Struct, frozen=True):
    """A launched daemon's process ended: ``stopped`` if asked to or if it exited 0, else
    ``lost`` (with a ``daemon_lost`` event naming the exit code)."""

    namespace: str
    worker_id: str
    returncode: int | None
    reason: str
    requested: bool = False


class Placed(Struct, frozen=True):
    """Where a provider runs a launched daemon (kept on its row, see ``Worker.placement``)."""

    namespace: str
    worker_id: str
    placement: dict[str, str]


class Report(NamedTuple):
    """What a daemon's latest heartbeat said it runs, and the latest claim it had taken."""

    claims: ClaimMark | None
    running: frozenset[str]
    #: when it came, by this process's monotonic clock (a wall clock may jump)
    heard: float = 0.0


class LastReport(Struct, frozen=True):
    """The latest :class:`Report` of a worker; ``None`` when none came since this registry
    started (a new leader knows nothing until the next heartbeat)."""

    worker_id: str


WorkerMsg = (
    Members
    | LastReport
    | Register
    | Beat
    | EditQueues
    | SetLabels
    | Scrub
    | RetireWorker
    | Sweep
    | ListWorkers
    | Prepare
    | Exited
    | Placed
    | SetLeases
    | MarkWorkerLost
)

_LIVE = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.RETIRING})
_DEAD = frozenset({WorkerStatus.STOPPED, WorkerStatus.LOST})


def _unheard(w: Worker) -> bool:
    """Launched and never heard from: still starting, or retired before it registered
    (its provider stops it where it waits); the launch timeout judges it, not heartbeats."""
    return w.status is WorkerStatus.STARTING or (
        w.status is WorkerStatus.RETIRING and w.last_heartbeat is None
    )


def is_member(worker: Worker, queue: str) -> bool:
    """A member pulls from the queue and has not stopped (lost workers may come back)."""
    return worker.status is not WorkerStatus.STOPPED and serves(worker, queue)


class WorkerRegistry(Actor[WorkerMsg]):
    name = "worker-registry"

    def __init__(
        self,
        store: RegistryStore,
        *,
        lost_after_s: float = 10.0,
        launch_timeout_s: float = 120.0,
        persist_every_s: float = 5.0,
        clock: Callable[[], datetime] = now,
        quotas: Quotas = DEFAULT_QUOTAS,
        on_lost: Callable[[Worker], None] | None = None,
    ) -> None:
        self._store = store
        #: told of each worker once its lost row is stored (its runs go back to their queues)
        self._on_lost = on_lost
        self._quotas = quotas
        #: namespace -> org, read once per namespace (``daemons_per_org`` counts per org)
        self._orgs: dict[str, str] = {}
        #: the server's wall clock (injectable for tests): liveness is judged by it alone
        self._clock = clock
        self._lost_after = timedelta(seconds=lost_after_s)
        self._launch_timeout = timedelta(seconds=launch_timeout_s)
        #: worker id -> when its launch timeout started, if not at ``started_at``: when its
        #: provider let it out of a queue, or when this registry started
        self._launch_clock: dict[str, datetime] = {}
        self._persist_every = timedelta(seconds=persist_every_s)
        self._rows: dict[str, Worker] = {}
        #: workers whose row in memory is newer than the stored one by liveness alone
        self._unsaved: set[str] = set()
        self._flushed_at: datetime | None = None
        #: the write of heartbeat times under way (see :meth:`_start_flush`)
        self._flushing: asyncio.Future[None] | None = None
        self._retiring: set[str] = set()
        #: steal leases by worker id, as the controller last set them
        self._leases: dict[str, list[StealGrant]] = {}
        #: each live worker's latest heartbeat's report, in memory only (the next one
        #: replaces it; a stopped or lost worker's is dropped)
        self._reports: dict[str, Report] = {}
        #: when this registry began answering heartbeats: silence before it is not counted
        self._since = clock()

    async def started(self) -> None:
        rows = {w.id: w for w in await self._store.list_workers()}
        # After a crash, heartbeats heard since the last write are newer than the rows.
        for wid in self._unsaved & rows.keys():
            heard, stored = self._rows[wid].last_heartbeat, rows[wid].last_heartbeat
            if heard is not None and (stored is None or heard > stored):
                rows[wid] = msgspec.structs.replace(rows[wid], last_heartbeat=heard)
        self._unsaved &= rows.keys()
        self._rows = rows
        self._retiring = {w.id for w in self._rows.values() if w.status is WorkerStatus.RETIRING}
        # A launch in flight across a restart gets a full launch timeout from now, and a
        # running worker a full lost_after: while no registry ran, no heartbeat was answered.
        ts = self._since = self._clock()
        self._launch_clock = {
            w.id: ts for w in self._rows.values() if w.status is WorkerStatus.STARTING
        }

    async def stopped(self) -> None:
        # A restart of the control plane finds the heartbeat times as they were at its stop.
        await self._flush(self._clock(), force=True)

    async def handle(self, msg: WorkerMsg) -> Any:
        match msg:
            case Register(worker=w):
                return await self._register(w)
            case Beat(heartbeat=hb):
                return await self._beat(hb)
            case EditQueues():
                return await self._edit(msg)
            case SetLabels(namespace=ns, ref=ref, labels=labels):
                return await self._set_labels(ns, ref, labels)
            case Members(namespace=ns, queue=queue):
                return [w for w in self._in(ns) if is_member(w, queue)]
            case Scrub(namespace=ns, queue=queue):
                scrubbed = await self._store.scrub_queue_from_workers(ns, queue)
                # The stored rows may be behind on liveness: only their membership is news.
                for w in scrubbed:
                    self._rows[w.id] = msgspec.structs.replace(
                        self._rows.get(w.id, w), queues=w.queues
                    )
                return [self._rows[w.id] for w in scrubbed]
            case RetireWorker(namespace=ns, ref=ref):
                return await self._retire(ns, ref)
            case Sweep():
                lost = await self._sweep(self._clock())
                flushing = await self._start_flush(self._clock())
                return lost if flushing is None else Later(self._saved_all(flushing, lost))
            case LastReport(worker_id=wid):
                return self._reports.get(wid)
            case ListWorkers(namespace=ns):
                return list(self._rows.values()) if ns is None else self._in(ns)
            case Prepare():
                return await self._prepare(msg)
            case Exited():
                return await self._exited(msg)
            case Placed(namespace=ns, worker_id=wid, placement=placement):
                w = self._rows.get(wid)
                if w is None or w.namespace != ns:
                    return None
                if w.placement == placement:
                    return w
                if is_queued(w.placement) and not is_queued(placement):
                    self._launch_clock[wid] = self._clock()
                new = msgspec.structs.replace(w, placement=placement)
                await self._save(new)
                return new
            case SetLeases(leases=leases):
                self._leases = dict(leases)
                return None
            case MarkWorkerLost(namespace=ns, worker_id=wid, detail=detail):
                w = self._rows.get(wid)
                if w is None or w.namespace != ns or not self._overdue(w, self._clock()):
                    return None
                return await self._lose(w, detail)

    def _in(self, ns: str) -> list[Worker]:
        return sorted((w for w in self._rows.values() if w.namespace == ns), key=lambda w: w.name)

    def find(self, ns: str, ref: str) -> Worker | None:
        worker = self._rows.get(ref)
        if worker is not None and worker.namespace == ns:
            return worker
        return next((w for w in self._rows.values() if w.namespace == ns and w.name == ref), None)

    async def _register(self, reg: WorkerRegister) -> Worker:
        validate_name("worker", reg.name)
        for q in reg.queues:
            validate_name("queue", q)
        existing = self._rows.get(reg.id) if reg.id else self.find(reg.namespace, reg.name)
        if existing is None or existing.status not in quotas.COUNTED:
            await self._room(reg.namespace, 1)
        ts = self._clock()
        worker = Worker(
            id=reg.id or (existing.id if existing else new_worker_id()),
            name=reg.name,
            namespace=reg.namespace,
            queues=_unique(reg.queues) if existing is None else existing.queues,
            labels=reg.labels,
            provider=reg.provider,
            managed=reg.managed,
            status=WorkerStatus.IDLE,
            last_heartbeat=ts,
            started_at=existing.started_at if existing else ts,
            placement=existing.placement if existing else {},
            resources=_fresh(reg.resources),
        )
        # Taken in memory now and answered once stored: the registrations of a fleet
        # starting at once reach the store together (one batch, not one write each).
        before = self._rows.get(worker.id)
        self._rows[worker.id] = worker
        self._unsaved.discard(worker.id)
        self._launch_clock.pop(worker.id, None)
        saving = asyncio.ensure_future(self._store.upsert_worker(worker))
        await asyncio.sleep(0)  # the write joins the store's queue before the next message's
        return Later(self._registered(worker, before, saving))

    async def _registered(self, worker: Worker, before: Worker | None, saving: Any) -> Worker:
        try:
            await saving
        except LakeshoreError:
            if self._rows.get(worker.id) is worker:  # nothing newer taken meanwhile
                if before is None:
                    del self._rows[worker.id]
                else:
                    self._rows[worker.id] = before
            raise
        log.info("worker %s (%s) registered in %s", worker.name, worker.id, worker.namespace)
        return worker

    async def _beat(self, hb: Heartbeat) -> HeartbeatReply:
        worker = self._rows.get(hb.worker_id)
        if worker is None or worker.namespace != hb.namespace:
            return HeartbeatReply(queues=[], unknown=True)
        status = hb.status
        if worker.id in self._retiring and status is not WorkerStatus.STOPPED:
            status = WorkerStatus.RETIRING
        if worker.status is WorkerStatus.LOST and status is not WorkerStatus.STOPPED:
            log.info("worker %s (%s) is back", worker.name, worker.id)
        if status is WorkerStatus.STOPPED:
            self._reports.pop(worker.id, None)
        else:
            self._reports[worker.id] = Report(hb.claims, frozenset(hb.current), time.monotonic())
        current = hb.current[0] if hb.current else None
        # The server's clock, not the daemon's (which may be minutes off): liveness and the
        # times shown are all the server's.
        heard = self._clock()
        resources = worker.resources
        if resources is not None and hb.free is not None:
            resources = WorkerResources(total=resources.total, free=hb.free)
        new = msgspec.structs.replace(
            worker,
            status=status,
            current=current,
            running=list(hb.current) if status is not WorkerStatus.STOPPED else [],
            resources=resources,
            last_heartbeat=heard,
        )
        self._rows[worker.id] = new
        self._unsaved.add(worker.id)
        if status is WorkerStatus.STOPPED:
            self._retiring.discard(worker.id)
        ts = self._clock()
        steal = [g for g in self._leases.get(worker.id, ()) if g.until > ts]
        reply = HeartbeatReply(queues=new.queues, retire=worker.id in self._retiring, steal=steal)
        if (new.status, new.running, new.resources) == (
            worker.status,
            worker.running,
            worker.resources,
        ):
            return reply
        # Readers of the rows (``workers ls``) see a change of state once the daemon is
        # answered. Taken in memory now and answered once stored, like a registration: a
        # write waiting on a busy store holds this daemon's answer, never every other
        # daemon's heartbeat (nor the controller's tick) behind it in the inbox.
        saving = asyncio.ensure_future(self._store.update_liveness([new]))
        await asyncio.sleep(0)  # the write joins the store's queue before the next message's
        return Later(self._saved(new, saving, reply))

    async def _saved(self, row: Worker, saving: Any, answer: Any) -> Any:
        """``answer`` once ``saving`` (the write of ``row``) is done; the row is then stored
        as it is in memory, unless a heartbeat changed it meanwhile."""
        await saving
        if self._rows.get(row.id) is row:
            self._unsaved.discard(row.id)
        return answer

    async def _retire(self, ns: str, ref: str) -> Worker:
        worker = self.find(ns, ref)
        if worker is None:
            raise WorkerNotFound(ns, ref)
        if worker.status in (WorkerStatus.STOPPED, WorkerStatus.LOST):
            return worker
        self._retiring.add(worker.id)
        new = msgspec.structs.replace(worker, status=WorkerStatus.RETIRING)
        await self._save(new)
        return new

    async def _sweep(self, ts: datetime) -> list[Worker]:
        overdue = [
            w
            for w in self._rows.values()
            if (self._launch_overdue(w, ts) if _unheard(w) else self._overdue(w, ts))
        ]
        lost = [await self._explain_loss(w, {}) for w in overdue]
        if lost:
            # Every status in one statement: a NATS outage loses hundreds of workers at once.
            await self._store.update_liveness(lost)
        for w in lost:
            self._rows[w.id] = w
            self._unsaved.discard(w.id)
            self._lost(w)
        return lost

    def _launch_overdue(self, w: Worker, ts: datetime) -> bool:
        """A launched daemon not registered within the launch timeout, counted from its
        start, or from when its provider let it out of a queue (not while it is in one)."""
        if is_queued(w.placement):
            return False
        return ts - self._launch_clock.get(w.id, w.started_at) > self._launch_timeout

    def _overdue(self, w: Worker, ts: datetime) -> bool:
        """A live worker silent for longer than ``lost_after_s`` at ``ts``, counted from
        its last heartbeat or from this registry's start, whichever is later."""
        if w.status not in _LIVE:
            return False
        if w.last_heartbeat is None:
            return True
        return ts - max(w.last_heartbeat, self._since) > self._lost_after

    async def _lose(self, w: Worker, extra: dict[str, Any]) -> Worker:
        new = await self._explain_loss(w, extra)
        await self._save(new)
        self._lost(new)
        return new

    def _lost(self, w: Worker) -> None:
        report = self._reports.pop(w.id, None)
        silent_s = time.monotonic() - report.heard if report is not None else None
        if silent_s is not None and silent_s < self._lost_after.total_seconds():
            # Lost by the wall clock, which jumped: a wall clock that jumps must not send
            # the runs of a daemon that heartbeats still back to their queues.
            log.warning("worker %s: its last heartbeat is recent by the monotonic clock", w.id)
            return
        if self._on_lost is not None:
            self._on_lost(w)

    async def _explain_loss(self, w: Worker, extra: dict[str, Any]) -> Worker:
        """Append the ``daemon_lost`` events of ``w``; answers its lost row (not written).

        The events go first so that whoever sees the status also finds the why.
        """
        log.warning("worker %s (%s) is lost: no heartbeat since %s", w.name, w.id, w.last_heartbeat)
        detail = {
            "worker": w.id,
            "name": w.name,
            "current": w.current,
            "last_heartbeat": str(w.last_heartbeat),
            **extra,
        }
        for q in w.queues or [DEFAULT_QUEUE]:
            await self._store.append_queue_event(w.namespace, q, "daemon_lost", None, detail)
        return msgspec.structs.replace(w, status=WorkerStatus.LOST)

    async def _prepare(self, msg: Prepare) -> list[Worker]:
        replaced = []
        for w in msg.workers:
            held = self.find(msg.namespace, w.name)
            if held is not None and held.status not in _DEAD:
                raise AlreadyExists(
                    "worker",
                    w.name,
                    f" in namespace {msg.namespace!r} and is {held.status}; choose another "
                    f"--name or stop it first with `lakeshore daemon stop {w.name}`",
                )
            if held is not None:
                replaced.append(held)
        fits = await self._room(msg.namespace, len(msg.workers), partial=msg.partial)
        made = msg.workers[:fits]
        names = {w.name for w in made}
        for old in [held for held in replaced if held.name in names]:
            await self._store.delete_worker(old.id)
            self._rows.pop(old.id, None)
            self._unsaved.discard(old.id)
            self._retiring.discard(old.id)
        for w in made:
            await self._save(w)
        return made

    async def _room(self, ns: str, wanted: int, *, partial: bool = False) -> int:
        """How many of ``wanted`` new daemons ``ns``'s org may have (see
        :func:`lakeshore.quotas.daemon_room`); all of them in a namespace without a row.

        Raises:
            QuotaExceeded: ``daemons_per_org``.
        """
        org = await self._org_of(ns)
        if org is None:
            return wanted
        counted = {w.namespace for w in self._rows.values() if w.status in quotas.COUNTED}
        for other in counted - self._orgs.keys():
            await self._org_of(other)
        mine = {n for n, o in self._orgs.items() if o == org}
        have = quotas.daemons_in(self._rows.values(), mine)
        return quotas.daemon_room(self._quotas, org, have, wanted, partial=partial)

    async def _org_of(self, ns: str) -> str | None:
        org = self._orgs.get(ns)
        if org is None and (row := await self._store.get_namespace(ns)) is not None:
            org = self._orgs[ns] = row.org
        return org

    async def _exited(self, msg: Exited) -> Worker | None:
        w = self._rows.get(msg.worker_id)
        if w is None or w.namespace != msg.namespace or w.status is WorkerStatus.STOPPED:
            return w
        clean = msg.requested or msg.returncode == 0
        if w.status is WorkerStatus.LOST and not clean:
            return w
        self._retiring.discard(w.id)
        if clean:
            new = msgspec.structs.replace(w, status=WorkerStatus.STOPPED, current=None, running=[])
        else:
            new = msgspec.structs.replace(w, status=WorkerStatus.LOST)
            detail = {"worker": w.id, "name": w.name, "current": w.current}
            detail |= {"exit_code": msg.returncode, "reason": msg.reason}
            for q in w.queues or [DEFAULT_QUEUE]:
                await self._store.append_queue_event(w.namespace, q, "daemon_lost", None, detail)
        await self._save(new)
        return new

    async def _edit(self, msg: EditQueues) -> Worker:
        # A queue need not exist yet to be added: membership lives on the worker row, and
        # the seed's worked example adds ``eval`` before anyone creates it.
        for q in [*msg.add, *msg.remove]:
            if q == DEFAULT_QUEUE:
                raise Invalid(
                    "'default' cannot be added or removed explicitly: the default queue is "
                    "the empty array — remove every other queue to pull from it"
                )
            validate_name("queue", q)
        worker = self.find(msg.namespace, msg.ref)
        if worker is None:
            raise WorkerNotFound(msg.namespace, msg.ref)
        queues = [q for q in worker.queues if q not in msg.remove]
        queues = _unique([*queues, *msg.add])
        if queues == worker.queues:
            return worker
        new = msgspec.structs.replace(worker, queues=queues)
        await self._save(new)
        for q in msg.add:
            if q not in worker.queues:
                await self._record(new, q, "member_added", msg.actor)
        for q in msg.remove:
            if q in worker.queues:
                await self._record(new, q, "member_removed", msg.actor)
        return new

    async def _set_labels(self, ns: str, ref: str, labels: dict[str, str]) -> Worker:
        worker = self.find(ns, ref)
        if worker is None:
            raise WorkerNotFound(ns, ref)
        if worker.labels == labels:
            return worker
        new = msgspec.structs.replace(worker, labels=dict(labels))
        await self._save(new)
        return new

    async def _save(self, worker: Worker) -> None:
        await self._store.upsert_worker(worker)
        self._rows[worker.id] = worker
        self._unsaved.discard(worker.id)

    async def _flush(self, ts: datetime, *, force: bool = False) -> None:
        """Write the liveness of every worker heard since its row was (see
        :meth:`_start_flush`), and wait for it."""
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        flushing = await self._start_flush(ts, force=force)
        if flushing is not None:
            await flushing

    async def _start_flush(
        self, ts: datetime, *, force: bool = False
    ) -> asyncio.Future[None] | None:
        """Start writing the liveness of every worker heard since its row was, in one
        statement, if ``persist_every_s`` has passed since the last such write (or
        ``force``) and none is under way; answers the write, or ``None``.

        The write goes on behind the inbox (a store busy with other work must not hold the
        heartbeats); it has joined the store's queue when this returns, so a later write of
        a row cannot be overtaken by it. A refusal of the store is logged and the write
        retried at the next sweep: the rows in memory stay the truth meanwhile.
        """
        if not self._unsaved or (self._flushing is not None and not self._flushing.done()):
            return None
        if (
            not force
            and self._flushed_at is not None
            and ts - self._flushed_at < self._persist_every
        ):
            return None
        rows = [self._rows[wid] for wid in self._unsaved]
        self._flushing = asyncio.ensure_future(self._flushed(rows, ts))
        await asyncio.sleep(0)  # the write joins the store's queue before the next message's
        return self._flushing

    async def _flushed(self, rows: list[Worker], ts: datetime) -> None:
        try:
            await self._store.update_liveness(rows)
        except LakeshoreError as e:
            log.warning("heartbeat times of %d worker(s) not written (retried): %s", len(rows), e)
            return
        # A worker heard again meanwhile is newer than what was written: it stays unsaved.
        self._unsaved -= {w.id for w in rows if self._rows.get(w.id) is w}
        self._flushed_at = ts

    async def _saved_all(self, flushing: asyncio.Future[None], answer: Any) -> Any:
        await asyncio.shield(flushing)
        return answer

    async def _record(self, w: Worker, queue: str, event: str, actor: str | None) -> None:
        await self._store.append_queue_event(
            w.namespace, queue, event, actor, {"worker": w.id, "name": w.name, "queues": w.queues}
        )


def new_worker_id() -> str:
    return "w-" + secrets.token_hex(6)


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _fresh(total: Capacity | None) -> WorkerResources | None:
    """A registering daemon's resources: all of them free."""
    return None if total is None else WorkerResources(total=total, free=total)
