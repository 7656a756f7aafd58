"""Job routes: list and show invocations, read their results, cancel them.

Jobs are read from the store (the Recorder's history); a result is read from the results
bucket at the epoch the Recorder accepted. Waiting (``?wait_s=``) is a future answered by
the Recorder once the invocation's terminal event is recorded, so nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from aiohttp import web
from msgspec import Struct

from lakeshore.actors.controller import PendingHint
from lakeshore.actors.directory import Lookup
from lakeshore.actors.queue import CancelPending, GetQueue
from lakeshore.actors.recorder import Knows, WaitFinished, WaitRecorded
from lakeshore.actors.workers import Members
from lakeshore.errors import Conflict, Invalid, NotFound, QueueNotFound, Unavailable
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, reply
from lakeshore.http.state import PLANE
from lakeshore.model import (
    TERMINAL_STATES,
    DaemonControl,
    InvocationState,
    Job,
    JobDetail,
    QueueState,
    RemoteError,
    Result,
    WorkerStatus,
    validate_name,
)
from lakeshore.store.jobs import JobRecord

routes = Routes()
BASE = "/v1/namespaces/{ns}/jobs"
#: Longest ``wait_s`` of the result route (seconds).
MAX_WAIT_S = 600.0
#: How long a lookup of an unknown job waits for the Recorder to catch up (seconds).
CATCH_UP_S = 2.0
#: Members that can take work now.
_WITH_RESULT = frozenset({InvocationState.SUCCEEDED, InvocationState.FAILED})
_SERVING = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})
_ENDED = {
    InvocationState.CANCELLED: ("lakeshore.Cancelled", "was cancelled"),
    InvocationState.DROPPED: ("lakeshore.Dropped", "was dropped from its full queue"),
}


class JobList(Struct, frozen=True):
    jobs: list[Job]


@routes.route(
    "GET", BASE, "Invocations, newest first", answer=JobList,
    query=("queue", "state", "limit", "after"),
)  # fmt: skip
async def list_jobs(request: web.Request) -> web.Response:
    ns = await namespace(request)
    q = request.query
    queue = validate_name("queue", q["queue"]) if q.get("queue") else None
    jobs = await request.app[PLANE].store.list_jobs(
        ns.name, queue=queue, state=_state(q.get("state")), limit=_limit(q.get("limit")),
        after=q.get("after") or None,
    )  # fmt: skip
    reasons = {j.queue: "" for j in jobs if j.state is InvocationState.PENDING}
    for name in reasons:
        reasons[name] = await _pending_reason(request, ns.name, name)
    return reply(JobList([_with_reason(j, reasons.get(j.queue)) for j in jobs]))


@routes.route("GET", BASE + "/{id}", "One invocation with its attempts", answer=JobDetail)
async def show(request: web.Request) -> web.Response:
    ns = await namespace(request)
    record = await _record(request, ns.name)
    return reply(await _shown(request, record.job))


@routes.route(
    "GET", BASE + "/{id}/result", "The result once finished (202 Job while not)",
    answer=Result, query=("wait_s",),
)  # fmt: skip
async def result(request: web.Request) -> web.Response:
    ns = await namespace(request)
    wait_s = _wait(request.query.get("wait_s"))
    job_id = request.match_info["id"]
    plane = request.app[PLANE]
    finished = await plane.recorder.ask(WaitFinished(ns.name, job_id))
    try:
        record = None
        if not finished.done():
            if not await _known(request, ns.name, job_id):
                record = await _record(request, ns.name)  # 404 for an unknown id
            if (record is None or record.job.state not in TERMINAL_STATES) and wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(finished), wait_s)
        # Fast path: the Recorder knows how a recent invocation ended and with which
        # attempt, so a finished run's result is one KV read, not a query of the history.
        fence = finished.result() if finished.done() else None
        if fence is not None and fence.terminal in _WITH_RESULT:
            stored = await plane.events.get_result(ns.name, job_id, fence.started_epoch)
            if stored is not None:
                return reply(stored)
    finally:
        finished.cancel()  # tells the Recorder to forget the waiter
    if record is None or fence is not None:
        record = await _record(request, ns.name)
    job = record.job
    if job.state not in TERMINAL_STATES:
        return reply(_summary(await _shown(request, job)), status=202)
    if job.state in _ENDED:
        kind, what = _ENDED[job.state]
        error = RemoteError(type=kind, message=f"invocation {job.id} {what}")
        return reply(Result(id=job.id, ok=False, error=error, worker=job.worker))
    return reply(await _stored_result(request, ns.name, record))


@routes.route(
    "POST", BASE + "/{id}/cancel",
    "Cancel: a pending job is removed (200), a running one is stopped by its daemon (202)",
    answer=Job,
)  # fmt: skip
async def cancel(request: web.Request) -> web.Response:
    ns = await namespace(request)
    plane = request.app[PLANE]
    record = await _record(request, ns.name)
    job = record.job
    if job.state in TERMINAL_STATES:
        raise Conflict(f"job {job.id!r} is already {job.state.value}; there is nothing to cancel")
    if job.state is InvocationState.RUNNING:
        await _stop_run(request, ns.name, job)
        return reply(_summary(job), status=202)
    if record.seq is None:
        raise Conflict(f"job {job.id!r} has no queue message recorded yet; retry in a moment")
    queue = await plane.directory.ask(Lookup(ns.name, job.queue))
    removed = await queue.ask(
        CancelPending(invocation_id=job.id, seq=record.seq, actor=caller(request).token_id)
    )
    await _wait_finished(request, ns.name, job.id, plane.settings.ask_timeout_s)
    job = (await _record(request, ns.name)).job
    if not removed and job.worker is not None:
        # A daemon claimed it meanwhile: the cancel stands (it was recorded first), so the
        # run it started is now pointless.
        await _stop_run(request, ns.name, job)
    if job.state is InvocationState.CANCELLED:
        return reply(_summary(job))
    if job.state in TERMINAL_STATES:
        raise Conflict(f"job {job.id!r} {job.state.value} before it could be cancelled")
    raise Unavailable(f"the cancel of job {job.id!r} was sent but is not recorded yet")


async def _known(request: web.Request, ns: str, job_id: str) -> bool:
    """Whether the Recorder has the job in memory once it has read the events stream up to
    now (a submit answers before its events are recorded): the hot path of a result wait
    never queries the history."""
    plane = request.app[PLANE]
    if await plane.recorder.ask(Knows(ns, job_id)):
        return True
    await _catch_up(plane)
    return await plane.recorder.ask(Knows(ns, job_id))


async def _catch_up(plane) -> None:
    _, last = await plane.events.progress()
    recorded = await plane.recorder.ask(WaitRecorded(last))
    try:
        async with asyncio.timeout(CATCH_UP_S):
            await recorded
    except TimeoutError:
        recorded.cancel()


async def _record(request: web.Request, ns: str) -> JobRecord:
    job_id = request.match_info["id"]
    plane = request.app[PLANE]
    record = await plane.store.get_job(ns, job_id)
    if record is None:
        # Read your writes: a submit answers before the Recorder has written its events, so
        # an unknown id waits (bounded) for the Recorder to catch up with the stream once.
        await _catch_up(plane)
        record = await plane.store.get_job(ns, job_id)
    if record is None:
        raise NotFound(
            f"no job {job_id!r} in namespace {ns!r}; list jobs with `lakeshore jobs ls -n {ns}`"
        )
    return record


async def _wait_finished(request: web.Request, ns: str, job_id: str, wait_s: float) -> None:
    """Return once the job's end is recorded, or after ``wait_s``."""
    finished = await request.app[PLANE].recorder.ask(WaitFinished(ns, job_id))
    try:
        # On timeout wait_for cancels the future, which tells the Recorder to forget it.
        await asyncio.wait_for(finished, wait_s)
    except TimeoutError:
        pass


async def _stored_result(request: web.Request, ns: str, record: JobRecord) -> Result:
    job, epoch = record.job, record.result_epoch
    stored = None
    if epoch is not None:
        stored = await request.app[PLANE].events.get_result(ns, job.id, epoch)
    if stored is not None:
        return stored
    if job.state is InvocationState.FAILED:
        error = job.error or RemoteError(type="lakeshore.Failed", message="no error recorded")
        return Result(id=job.id, ok=False, error=error, worker=job.worker, epoch=epoch or 0)
    raise NotFound(
        f"the result of job {job.id!r} is no longer stored (results are kept for 7 days)"
    )


async def _stop_run(request: web.Request, ns: str, job: Job) -> None:
    if job.worker is None:
        raise Conflict(f"job {job.id!r} is running but its worker is not recorded yet")
    await request.app[PLANE].bus.send_control(ns, job.worker, DaemonControl(cancel=job.id))


async def _shown(request: web.Request, job: JobDetail) -> JobDetail:
    if job.state is not InvocationState.PENDING:
        return job
    return _with_reason(job, await _pending_reason(request, job.namespace, job.queue))


async def _pending_reason(request: web.Request, ns: str, queue: str) -> str:
    """Why a pending job of ``queue`` is not running: the first that applies of
    the controller's ``scaling_up``, ``pool_at_max`` or ``steal_delay`` (only while no
    member can take it), ``no_members``, ``all_members_busy``, ``draining``,
    ``archived``, else ``queued``."""
    plane = request.app[PLANE]
    members = await plane.workers.ask(Members(ns, queue))
    serving = [w for w in members if w.status in _SERVING]
    if not serving or all(w.status is WorkerStatus.BUSY for w in serving):
        try:
            hint = await plane.controller.ask(PendingHint(ns, queue))
        except Unavailable:
            hint = None  # the controller's view is a refinement; the members' still holds
        return hint or ("all_members_busy" if serving else "no_members")
    try:
        row = await (await plane.directory.ask(Lookup(ns, queue))).ask(GetQueue())
    except QueueNotFound:
        return "archived"
    if row.state in (QueueState.DRAINING, QueueState.ARCHIVED):
        return row.state.value
    return "queued"


def _with_reason(job: Job, reason: str | None) -> Job:
    if job.state is not InvocationState.PENDING or reason is None:
        return job
    return msgspec.structs.replace(job, pending_reason=reason)


def _summary(job: Job) -> Job:
    """The ``Job`` fields of a ``JobDetail`` (the routes answer ``Job`` there)."""
    if type(job) is Job:
        return job
    fields = msgspec.structs.asdict(job)
    del fields["attempts"], fields["stale"]
    return Job(**fields)


def _state(raw: str | None) -> InvocationState | None:
    if not raw:
        return None
    try:
        return InvocationState(raw)
    except ValueError:
        allowed = ", ".join(s.value for s in InvocationState)
        raise Invalid(f"unknown state {raw!r}; use one of {allowed}") from None


def _limit(raw: str | None) -> int:
    if raw is None:
        return 100
    limit = int(raw) if raw.isdigit() else 0
    if not 1 <= limit <= 1000:
        raise Invalid(f"limit must be an integer from 1 to 1000, got {raw!r}")
    return limit


def _wait(raw: str | None) -> float:
    if raw is None:
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT_S:
        raise Invalid(f"wait_s must be a number of seconds from 0 to {MAX_WAIT_S:g}, got {raw!r}")
    return wait
