"""JobService: the one owner of the jobs workflow — submit, list, show, result, cancel.

HTTP, the NATS gateway and the dashboard all call it; none of them touches the store, the
queue actors, the Recorder or the bus for a job. It holds no state of its own: a job's
history is the Recorder's (read from the store), its pending message the queue actor's,
its result the daemon's (in the results bucket), its run the daemon's.

Reading your writes: a submit answers before the Recorder has written its events, so a
lookup of an id the store does not know waits (bounded) for the Recorder to catch up with
the events stream once, and only then answers 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from lakeshore import fit
from lakeshore.actors.base import ActorRef
from lakeshore.actors.controller import PendingHint
from lakeshore.actors.directory import Lookup
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.queue import CancelPending, GetQueue, Submit
from lakeshore.actors.recorder import (
    CarriedResult,
    Knows,
    Settled,
    Unfinished,
    WaitFinished,
    WaitRecorded,
)
from lakeshore.actors.workers import LastReport, ListWorkers, Members, Report
from lakeshore.attempts import stopping_text, tally
from lakeshore.bus.port import Bus, Feed
from lakeshore.errors import Conflict, Invalid, NotFound, QueueNotFound, Unavailable
from lakeshore.fencing import open_claim
from lakeshore.model import (
    INLINE_RESULT_BYTES,
    TERMINAL_STATES,
    BatchTally,
    Cause,
    ClaimMark,
    DaemonControl,
    HeldAnswer,
    InvocationState,
    InvocationSubmit,
    Job,
    JobDetail,
    QueueState,
    RemoteError,
    Result,
    SubmitAnswer,
    Takeover,
    Worker,
    WorkerStatus,
    now,
)
from lakeshore.quotas import COUNTED, DEFAULT_QUOTAS, Quotas
from lakeshore.services.code import CodeService
from lakeshore.services.code import require as require_code
from lakeshore.services.pending import OrgRows, PendingTally
from lakeshore.services.retries import retried
from lakeshore.services.waits import ResultWaits
from lakeshore.store.port import JobReads, JobRecord

if TYPE_CHECKING:
    from lakeshore.metrics import InvocationMetrics

log = logging.getLogger(__name__)
#: A job or a job with its attempts.
J = TypeVar("J", bound=Job)
#: How long a lookup of an unknown job waits for the Recorder to catch up (seconds).
CATCH_UP_S = 2.0
_WITH_RESULT = frozenset({InvocationState.SUCCEEDED, InvocationState.FAILED})
#: How long a daemon leaves a redelivery whose earlier attempt is still held before it
#: looks again (seconds): at most this, at least the second, else until the holder would
#: count as lost.
HELD_RETRY_S = 5.0
HELD_MIN_RETRY_S = 0.2
#: Members that can take work now.
_SERVING = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})
_ENDED = {
    InvocationState.CANCELLED: ("lakeshore.Cancelled", "was cancelled"),
    InvocationState.DROPPED: ("lakeshore.Dropped", "was dropped from its full queue"),
}


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What a cancel did: ``job`` as recorded; ``stopping`` when its daemon was told to stop
    a run (it ends ``cancelled`` once the daemon has stopped it)."""

    job: Job
    stopping: bool


class JobStore(JobReads, OrgRows, Protocol):
    """The history's job queries, and the rows an org's pending count needs."""


class JobService:
    """Submit and follow invocations.

    Args:
        store: the history's job queries, namespace and queue rows.
        results: where daemons' results are read (the events feed's results bucket).
        bus: daemon control (cancel a run).
        directory, workers, controller, recorder: the actors asked.
        outbox: the events of this plane's answered submits not published yet (reads wait
            for them).
        ask_timeout_s: the bound of an ask beyond a submit's own wait (seconds).
        quotas: the server's quotas (``pending_per_org`` is checked on submit).
        metrics: counts deduplicated submits (``None``: not counted).
        code: checks that the snapshots a submit names are stored (``None``: none are).
        noted: the jobs producers said they stored themselves (``direct_submit``): known to
            a result wait before the Recorder has heard of them.
    """

    def __init__(
        self,
        *,
        store: JobStore,
        results: Feed,
        bus: Bus,
        directory: ActorRef[Any],
        workers: ActorRef[Any],
        controller: ActorRef[Any],
        recorder: ActorRef[Any],
        outbox: Outbox,
        ask_timeout_s: float,
        quotas: Quotas = DEFAULT_QUOTAS,
        metrics: InvocationMetrics | None = None,
        lost_after_s: float = 10.0,
        code: CodeService | None = None,
        noted: Callable[[str, str], bool] = lambda namespace, job_id: False,
    ) -> None:
        self._store, self._results, self._bus = store, results, bus
        self._code, self._noted = code, noted
        self._metrics = metrics
        self._directory, self._workers = directory, workers
        self._controller, self._recorder, self._outbox = controller, recorder, outbox
        self._ask_timeout_s = ask_timeout_s
        self._pending = PendingTally(store, bus, quotas)
        self._waits = ResultWaits(quotas)
        self._lost_after_s = lost_after_s

    async def submit(
        self,
        namespace: str,
        queue: str,
        invocations: list[InvocationSubmit],
        *,
        actor: str | None,
        wait_s: float,
    ) -> SubmitAnswer:
        """Admit invocations to a queue, all or nothing (see the queue's admission policy).

        Args:
            wait_s: how long a submit to a full ``block`` queue may wait for room.

        Raises:
            QueueNotFound, WrongState, Invalid, TooLarge, QueueFull: refused; nothing admitted
                (QueueFull says how many of a batch were).
            QuotaExceeded: the org would have more than ``pending_per_org`` pending.
            Invalid: an invocation names ``retry_of`` (only :meth:`retry` links a retry).
        """
        if any(spec.retry_of is not None for spec in invocations):
            raise Invalid("retry_of is set by the retry route: `lakeshore jobs retry ID`")
        return await self._submit(namespace, queue, invocations, actor=actor, wait_s=wait_s)

    async def _submit(
        self,
        namespace: str,
        queue: str,
        invocations: list[InvocationSubmit],
        *,
        actor: str | None,
        wait_s: float,
    ) -> SubmitAnswer:
        ref = await self._directory.ask(Lookup(namespace, queue))
        org = await self._pending.reserve(namespace, len(invocations))
        try:
            digests = {spec.code for spec in invocations if spec.code is not None}
            await require_code(self._code, org, digests)
            admitted: asyncio.Future[SubmitAnswer] = await ref.ask(
                Submit(invocations, actor, wait_s)
            )
            # The queue actor answers at once and settles the future once the work is in (a
            # ``block`` queue without room keeps it while others are served); the bound
            # below only guards against an actor that stopped meanwhile.
            try:
                async with asyncio.timeout(wait_s + self._ask_timeout_s):
                    answer = await asyncio.shield(admitted)
                    if self._metrics is not None and answer.duplicates:
                        self._metrics.deduplicated.inc(len(answer.duplicates))
                    return answer
            except TimeoutError:
                raise Unavailable(
                    f"queue {namespace}/{queue} did not admit the submit within {wait_s:g} s"
                ) from None
        except BaseException:
            self._pending.release(org, len(invocations))
            raise

    async def list(
        self,
        namespace: str,
        *,
        queue: str | None,
        state: InvocationState | Cause | None,
        limit: int,
        after: str | None,
    ) -> list[Job]:
        """Jobs newest first; pending ones carry their ``pending_reason``, and each one its
        ``worker_name`` while that worker's row exists."""
        await self.settled()
        jobs = await self._store.list_jobs(
            namespace, queue=queue, state=state, limit=limit, after=after
        )
        reasons = {j.queue: "" for j in jobs if j.state is InvocationState.PENDING}
        for name in reasons:
            reasons[name] = await self.pending_reason(namespace, name)
        names = await self._worker_names(namespace, jobs)
        members: dict[str, list[Worker]] = {}
        out = []
        for j in jobs:
            reason = reasons.get(j.queue)
            if j.state is InvocationState.PENDING and fit.asks_for_something(j.resources):
                if j.queue not in members:
                    members[j.queue] = await self._workers.ask(Members(namespace, j.queue))
                reason = _in_resources(j, reason, members[j.queue])
            out.append(_named(_with_reason(j, reason), names))
        return out

    async def batches(self, namespace: str, jobs: list[Job]) -> list[BatchTally]:
        """How the batches of ``jobs`` stand, each counted whole (not only its listed jobs),
        in the order they first appear."""
        return await self._store.batch_tallies(
            namespace, list(dict.fromkeys(j.batch for j in jobs if j.batch))
        )

    async def retry(
        self, namespace: str, job_id: str, *, actor: str | None, env: dict[str, str] | None
    ) -> Job:
        """Submit a finished job's body again, to its queue, as a new job linked to it
        (``retry_of``; the old one lists it in ``retried_by``).

        Args:
            env: the ``env`` of a command that had one: its values are kept nowhere once
                its message is gone (:mod:`lakeshore.model.redact`), so they are given again.

        Raises:
            NotFound: no such job.
            Conflict: it has not failed, been cancelled or been dropped, or its
                arguments were too large to keep.
            Invalid: ``env`` lacks a key the job had (or is given to a function).
            QueueNotFound, WrongState, QueueFull, QuotaExceeded: as :meth:`submit`.
        """
        record = await self._record(namespace, job_id)
        job = record.job
        spec = retried(job, record.submitted or {}, env)
        answer = await self._submit(namespace, job.queue, [spec], actor=actor, wait_s=0.0)
        [new_id] = answer.ids
        log.info("job %s retried as %s (attempt 0)", job.id, new_id)
        return Job(
            id=new_id, namespace=namespace, queue=job.queue, state=InvocationState.PENDING,
            fn=spec.fn, command=spec.command, priority=spec.priority,
            max_attempts=spec.max_attempts, retry_of=job.id,
        )  # fmt: skip

    async def show(self, namespace: str, job_id: str) -> JobDetail:
        """One job with its attempts (and ``pending_reason`` while pending), and its
        ``worker_name`` while that worker's row exists.

        Raises:
            NotFound: no such job once the Recorder has caught up.
        """
        record = await self._record(namespace, job_id)
        job = await self._shown(record.job)
        submitted = record.submitted or {}
        if job.fn is not None:
            job = msgspec.structs.replace(job, isolation=submitted.get("isolation") or "process")
        if submitted.get("code"):
            job = msgspec.structs.replace(job, code=submitted["code"])
        return _named(job, await self._worker_names(namespace, [job]))

    async def result(
        self,
        namespace: str,
        job_id: str,
        wait_s: float,
        *,
        org: str | None = None,
        asker: str | None = None,
    ) -> Result | Job:
        """The result once the job has finished, waiting up to ``wait_s`` for it.

        Args:
            org: the namespace's org, whose open waits are bounded (``None``: unbounded,
                for the plane's own callers).
            asker: who waits (a token, a NATS connection), bounded too.

        Returns:
            The :class:`Result` of a finished job (a cancelled or dropped one's is an
            error), else the unfinished :class:`Job`.

        Raises:
            NotFound: no such job, or its result is no longer kept.
            QuotaExceeded: the org or the asker holds as many waits open as it may.
        """
        if wait_s <= 0 or org is None:
            return await self._result(namespace, job_id, wait_s)
        with self._waits.hold(org, asker or f"org {org!r}"):
            return await self._result(namespace, job_id, wait_s)

    async def holder(self, namespace: str, job_id: str, epoch: int) -> HeldAnswer:
        """Whether an attempt of ``job_id`` earlier than ``epoch`` is still held by a live
        daemon (asked before a redelivery runs): a delivery count can rise without its
        holder having let go — a peer's NAK, ack or term, a ``nak`` sent in error — and the
        invocation must never run twice at once. The latest earlier attempt that has not
        ended counts (:func:`~lakeshore.fencing.open_claim`: a retried one has); its daemon
        holds it while the registry has not seen it stop or go silent (``lost_after_s``),
        however long the run lasts — unless a heartbeat it sent after it claimed the attempt
        no longer lists the invocation: then it let the run go without a word (its outcome
        could not be stored through an outage) and the redelivery runs. "After" is judged by
        the claim's mark (:class:`~lakeshore.model.ClaimMark`), not by clocks.

        The answer also tallies the earlier attempts from the history
        (:func:`~lakeshore.attempts.tally`, read once the Recorder has caught up with the
        events stream, bounded): how many count toward ``max_attempts``, how many were lost
        in a row, whether any was preempted or lost. It goes with a live holder's answer too:
        the daemon runs a redelivery anyway once its holder is itself."""
        claim = open_claim(await self._recorder.ask(Unfinished(namespace, job_id)), epoch)
        answer, record = await self._earlier(namespace, job_id, epoch)
        if claim is None:
            return answer
        held_epoch, worker = claim

        def taken_over(why: str) -> HeldAnswer:
            takeover = Takeover(worker=worker, epoch=held_epoch, why=why)
            return msgspec.structs.replace(answer, takeover=takeover)

        rows = [w for w in await self._workers.ask(ListWorkers(namespace)) if w.id == worker]
        if not rows:
            return taken_over("its daemon is gone")
        row = rows[0]
        if row.status not in COUNTED or row.last_heartbeat is None:
            return taken_over(f"its daemon is {row.status.value}")
        # Judged by its silence, not by its row's status: the registry's sweep marks a
        # dead daemon lost a tick after ``lost_after_s``, and its redelivery must not wait
        # for that.
        silent_s = (now() - row.last_heartbeat).total_seconds()
        left_s = self._lost_after_s - silent_s
        if left_s < 0:
            return taken_over(f"its daemon has been silent for {silent_s:.0f} s")
        report = await self._workers.ask(LastReport(worker))
        if let_go(report, job_id, claim_mark(record, held_epoch, worker)):
            return taken_over("its daemon no longer runs it")
        retry_s = min(HELD_RETRY_S, max(HELD_MIN_RETRY_S, left_s))
        return msgspec.structs.replace(answer, holder=worker, epoch=held_epoch, retry_s=retry_s)

    async def _earlier(
        self, namespace: str, job_id: str, epoch: int
    ) -> tuple[HeldAnswer, JobRecord | None]:
        """How the attempts before the redelivery ``epoch`` ended (``history`` false when
        the job is not in the history yet), and the job's record."""
        with contextlib.suppress(Unavailable):  # then the history as it stands
            await self._catch_up()
        record = await self._store.get_job(namespace, job_id)
        if record is None:
            return HeldAnswer(), None
        counted, lost_in_row, preempted, executions = tally(record.job.attempts, before=epoch)
        answer = HeldAnswer(
            history=True, counted=counted, lost_in_row=lost_in_row, preempted=preempted,
            attempts=executions,
        )  # fmt: skip
        return answer, record

    def open_waits(self, org: str) -> int:
        """The result waits ``org`` holds open now."""
        return self._waits.open(org)

    async def _result(self, namespace: str, job_id: str, wait_s: float) -> Result | Job:
        # A waiting asker listens first: the daemon's result put passes the control plane on
        # its way to the bucket, often before the Recorder has even told us it ended.
        watch = await self._results.watch_result(namespace, job_id) if wait_s > 0 else None
        try:
            finished = await self._recorder.ask(WaitFinished(namespace, job_id))
        except BaseException:
            if watch is not None:
                await watch.close()
            raise
        try:
            record = None
            if not finished.done():
                if not await self._known(namespace, job_id):
                    record = await self._record(namespace, job_id)  # 404 for an unknown id
                if (record is None or record.job.state not in TERMINAL_STATES) and wait_s > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(finished), wait_s)
            # Fast path: the Recorder knows how a recent invocation ended and with which
            # attempt, so a finished run's result is the put heard while waiting, or one KV
            # read, never a query of the history.
            fence = finished.result() if finished.done() else None
            if fence is not None and fence.terminal in _WITH_RESULT:
                epoch = fence.started_epoch
                stored = await self._recorder.ask(CarriedResult(namespace, job_id, epoch))
                stored = stored or (watch and await watch.result(epoch))
                stored = stored or await self._results.get_result(namespace, job_id, epoch)
                if stored is not None:
                    return stored
        finally:
            finished.cancel()  # tells the Recorder to forget the waiter
            if watch is not None:
                await watch.close()
        if record is None or fence is not None:
            record = await self._record(namespace, job_id)
        job = record.job
        if job.state not in TERMINAL_STATES:
            shown = summary(await self._shown(job))
            return _named(shown, await self._worker_names(namespace, [shown]))
        if job.state in _ENDED:
            if (stopped := await self._stopped_result(namespace, job)) is not None:
                return stopped
            kind, what = _ENDED[job.state]
            error = job.error or RemoteError(type=kind, message=f"invocation {job.id} {what}")
            return Result(id=job.id, ok=False, error=error, worker=job.worker)
        return await self._stored_result(namespace, record)

    async def cancel(self, namespace: str, job_id: str, actor: str | None) -> Cancelled:
        """Cancel: a pending job is removed from its queue, a running one stopped.

        Raises:
            NotFound: no such job.
            Conflict: it has already finished (or finished before the cancel landed).
            Unavailable: the cancel was sent but is not recorded yet.
        """
        record = await self._record(namespace, job_id)
        job = record.job
        if job.state in TERMINAL_STATES:
            raise Conflict(
                f"job {job.id!r} is already {job.state.value}; there is nothing to cancel"
            )
        if job.state is InvocationState.RUNNING:
            await self._stop_run(namespace, job, actor)
            return Cancelled(summary(job), stopping=True)
        if record.seq is None:
            raise Conflict(f"job {job.id!r} has no queue message recorded yet; retry in a moment")
        queue = await self._directory.ask(Lookup(namespace, job.queue))
        removed = await queue.ask(CancelPending(invocation_id=job.id, seq=record.seq, actor=actor))
        await self._wait_finished(namespace, job.id, self._ask_timeout_s)
        job = (await self._record(namespace, job_id)).job
        if not removed and job.worker is not None:
            # A daemon claimed it meanwhile: the cancel stands (it was recorded first), so the
            # run it started is now pointless.
            await self._stop_run(namespace, job, actor)
        if job.state is InvocationState.CANCELLED:
            return Cancelled(summary(job), stopping=False)
        if job.state in TERMINAL_STATES:
            raise Conflict(f"job {job.id!r} {job.state.value} before it could be cancelled")
        raise Unavailable(f"the cancel of job {job.id!r} was sent but is not recorded yet")

    async def pending_reason(self, namespace: str, queue: str) -> str:
        """Why a pending job of ``queue`` is not running: the first that applies of
        the controller's ``scaling_up``, ``pool_at_max`` or ``steal_delay`` (only while no
        member can take it), ``no_members``, ``all_members_busy``, ``draining``,
        ``archived``, else ``queued``."""
        members = await self._workers.ask(Members(namespace, queue))
        serving = [w for w in members if w.status in _SERVING]
        if not serving or all(w.status is WorkerStatus.BUSY for w in serving):
            try:
                hint = await self._controller.ask(PendingHint(namespace, queue))
            except Unavailable:
                hint = None  # the controller's view is a refinement; the members' still holds
            return hint or ("all_members_busy" if serving else "no_members")
        try:
            row = await (await self._directory.ask(Lookup(namespace, queue))).ask(GetQueue())
        except QueueNotFound:
            return "archived"
        if row.state in (QueueState.DRAINING, QueueState.ARCHIVED):
            return row.state.value
        return "queued"

    async def _worker_names(self, namespace: str, jobs: list[Job]) -> dict[str, str]:
        """Worker id → name, asked of the registry once for all ``jobs`` (not at all when
        none of them has a worker)."""
        if not any(j.worker for j in jobs):
            return {}
        workers = await self._workers.ask(ListWorkers(namespace))
        return {w.id: w.name for w in workers}

    async def _known(self, namespace: str, job_id: str) -> bool:
        """Whether the job is known: its record is in this plane's outbox, a producer said it
        stored it, or the Recorder has it in memory once it has read the events stream up to
        now (the hot path of a result wait never queries the history)."""
        if self._outbox.holds(namespace, job_id) or self._noted(namespace, job_id):
            return True
        if await self._recorder.ask(Knows(namespace, job_id)):
            return True
        await self._catch_up()
        return await self._recorder.ask(Knows(namespace, job_id))

    async def _catch_up(self) -> None:
        _, last = await self._results.progress()
        recorded = await self._recorder.ask(WaitRecorded(last))
        try:
            async with asyncio.timeout(CATCH_UP_S):
                await recorded
        except TimeoutError:
            recorded.cancel()

    async def settled(self) -> None:
        """Wait (briefly) until the history holds every submit this plane answered and every
        outcome the Recorder has accepted: a job just submitted is shown, and a job whose
        result was just answered never shows as running."""
        flushed = self._outbox.flushed()
        try:
            async with asyncio.timeout(CATCH_UP_S):
                if seq := await flushed:
                    await (await self._recorder.ask(WaitRecorded(seq)))
                await (await self._recorder.ask(Settled()))
        except TimeoutError:
            pass  # the history as it stands

    async def _record(self, namespace: str, job_id: str) -> JobRecord:
        await self.settled()
        record = await self._store.get_job(namespace, job_id)
        if record is None:
            await self._catch_up()
            record = await self._store.get_job(namespace, job_id)
        if record is None:
            raise NotFound(
                f"no job {job_id!r} in namespace {namespace!r}; "
                f"list jobs with `lakeshore jobs ls -n {namespace}`"
            )
        return record

    async def _wait_finished(self, namespace: str, job_id: str, wait_s: float) -> None:
        """Return once the job's end is recorded, or after ``wait_s``."""
        finished = await self._recorder.ask(WaitFinished(namespace, job_id))
        # On timeout wait_for cancels the future, which tells the Recorder to forget it.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(finished, wait_s)

    async def _stored_result(self, namespace: str, record: JobRecord) -> Result:
        job, epoch = record.job, record.result_epoch
        stored = record.result
        if stored is None and epoch is not None:
            stored = await self._results.get_result(namespace, job.id, epoch)
        if stored is not None:
            return stored
        if job.state is InvocationState.FAILED:
            error = job.error or RemoteError(type="lakeshore.Failed", message="no error recorded")
            return Result(id=job.id, ok=False, error=error, worker=job.worker, epoch=epoch or 0)
        raise NotFound(
            f"the result of job {job.id!r} is no longer stored (a result of up to "
            f"{INLINE_RESULT_BYTES:,} bytes is kept with the job's history, a larger one for "
            "7 days)"
        )

    async def _stopped_result(self, namespace: str, job: JobDetail) -> Result | None:
        """The result the daemon stored for a cancelled run (a command's: what it printed,
        how it was stopped), if there is one."""
        if job.state is not InvocationState.CANCELLED:
            return None
        epochs = [a.epoch for a in job.attempts if a.outcome == "cancelled" and a.epoch]
        if not epochs:
            return None  # cancelled while pending
        stored = await self._results.get_result(namespace, job.id, epochs[-1])
        if stored is None or stored.error is None or stored.error.type != _ENDED[job.state][0]:
            return None
        return stored

    async def _stop_run(self, namespace: str, job: Job, actor: str | None) -> None:
        if job.worker is None:
            raise Conflict(f"job {job.id!r} is running but its worker is not recorded yet")
        order = DaemonControl(cancel=job.id, by=actor)
        await self._bus.send_control(namespace, job.worker, order)

    async def _shown(self, job: JobDetail) -> JobDetail:
        if job.state is InvocationState.RUNNING:
            return _with_stopping(job)
        if job.state is not InvocationState.PENDING:
            return job
        reason = await self.pending_reason(job.namespace, job.queue)
        if fit.asks_for_something(job.resources):
            members = await self._workers.ask(Members(job.namespace, job.queue))
            reason = _in_resources(job, reason, members)
        return _with_reason(job, reason)


def _named(job: J, names: dict[str, str]) -> J:
    """``job`` with the name of its worker, and of each attempt's, while the worker's row
    is still there."""
    if isinstance(job, JobDetail) and any(a.worker in names for a in job.attempts):
        attempts = [
            msgspec.structs.replace(a, worker_name=names[a.worker]) if a.worker in names else a
            for a in job.attempts
        ]
        job = msgspec.structs.replace(job, attempts=attempts)
    name = names.get(job.worker) if job.worker else None
    return job if name is None else msgspec.structs.replace(job, worker_name=name)


def _with_stopping(job: JobDetail) -> JobDetail:
    """A running job whose attempt's stop runs says so (``stopping``)."""
    last = job.attempts[-1] if job.attempts else None
    if last is None or last.outcome != "running" or last.stopping is None:
        return job
    return msgspec.structs.replace(job, stopping=stopping_text(last.stopping, now()))


#: Reasons a request's own (:mod:`.fit`) do not replace: the queue itself is the matter.
_QUEUE_FIRST = frozenset({"no_members", "scaling_up", "pool_at_max", "draining", "archived"})


def _in_resources(job: Job, reason: str, members: list[Worker]) -> str:
    """The pending reason of ``job`` once its request is taken into account."""
    if reason in _QUEUE_FIRST or job.resources is None:
        return reason
    return fit.waiting(job.id, job.resources, members) or reason


def _with_reason(job: Job, reason: str | None) -> Job:
    if job.state is not InvocationState.PENDING or reason is None:
        return job
    return msgspec.structs.replace(job, pending_reason=reason)


def summary(job: Job) -> Job:
    """The ``Job`` fields of a ``JobDetail`` (routes answer ``Job`` for a summary)."""
    if type(job) is Job:
        return job
    fields = msgspec.structs.asdict(job)
    return Job(**{k: v for k, v in fields.items() if k in Job.__struct_fields__})


def claim_mark(record: JobRecord | None, epoch: int, worker: str) -> ClaimMark | None:
    """The mark of ``worker``'s claim of attempt ``epoch``; ``None``: not in the history."""
    if record is None:
        return None
    marks = (a.claim_mark for a in record.job.attempts if a.epoch == epoch and a.worker == worker)
    return next((m for m in marks if m is not None), None)


def let_go(report: Report | None, job_id: str, mark: ClaimMark | None) -> bool:
    """Its holder's heartbeat, made after the claim (at or past its mark), no longer lists
    the invocation. Without a report or the claim's mark, the holder is taken at its word:
    it holds the run."""
    if report is None or report.claims is None or mark is None or job_id in report.running:
        return False
    return mark.seen_by(report.claims)
