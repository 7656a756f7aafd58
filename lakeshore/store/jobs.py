"""Job queries over the invocation history: jobs, attempts and a queue's recent activity.

The history is the append-only ``invocation_events`` table. A job's current state is
derived from its accepted (non-``stale``) events exactly as :mod:`lakeshore.fencing`
derives it in memory (the SQL fragments come from :mod:`.fences`): the accepted terminal
event if any, else the greatest ``(epoch, rank)`` of the non-terminal ones.

The functions run on the store's thread, or (the reads tenants ask for: jobs, a queue's
activity) on a cursor of the tenants' reads (:mod:`.reads`); :class:`JobQueries`, mixed
into :class:`~lakeshore.store.duckdb.Store`, exposes them and :mod:`.fences` as coroutines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
import msgspec

from lakeshore.attempts import (
    CRASHED,
    INTERRUPTED,
    LOST,
    LOST_DAEMON,
    LOST_TOO_OFTEN,
    PREEMPTED,
    TIMED_OUT,
    tally,
)
from lakeshore.fencing import CLAIMING, Fence, Key
from lakeshore.model import (
    RESULT_EVENTS,
    RETRIED_STATES,
    TERMINAL_STATES,
    Attempt,
    BatchTally,
    Cause,
    CodeUse,
    EventType,
    InvocationState,
    Job,
    JobDetail,
    RemoteError,
    Result,
    inline_result,
)
from lakeshore.store import _rows, code_use, fences
from lakeshore.store import job_sql as q
from lakeshore.store._rows import INVOCATION_EVENT_COLUMNS
from lakeshore.store.port import JobRecord, QueueActivity
from lakeshore.store.ranks import Ranks

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")


def list_jobs(
    con: Con,
    namespace: str,
    queue: str | None,
    state: InvocationState | Cause | None,
    limit: int,
    after: str | None,
    ranks: Ranks,
) -> list[Job]:
    page = [after, after, limit]
    # Pick the page's ids with a cheap query, then aggregate those alone.
    if isinstance(state, Cause):
        ids = _newest_ids(con, q.NEWEST_ROWS_CAUSE, [namespace, queue, state.value], limit, after)
    elif state is None or state in TERMINAL_STATES:
        sql, params = (q.NEWEST_ROWS, []) if state is None else (q.NEWEST_ROWS_ENDED, [state.value])
        ids = _newest_ids(con, sql, [namespace, queue, *params], limit, after)
    else:
        sql = q.UNFINISHED_IDS
        params = [namespace, queue, namespace, queue, state.value, *page]
        ids = [r[0] for r in _all(con, sql, params)]
    recs = [dict(zip(q.JOB_COLUMNS, r, strict=True)) for r in _by_ids(con, namespace, ids)]
    waiting: dict[str, list[str]] = {}
    for r in recs:
        if r["state"] == InvocationState.PENDING:
            waiting.setdefault(r["queue"], []).append(r["id"])
    ahead: dict[str, int] = {}
    for name, pending in waiting.items():
        ahead.update(ranks.positions(con, namespace, name, pending))
    for r in recs:
        if r["id"] in ahead:
            r["position"] = ahead[r["id"]]
    return [_job(r, Job) for r in recs]


def _newest_ids(con: Con, sql: str, params: list[Any], limit: int, after: str | None) -> list[str]:
    """The ``limit`` greatest distinct ids below ``after`` of the rows ``sql`` selects:
    the newest rows, as many more as the page needs while a few invocations fill it."""
    rows = limit * 4
    while True:
        found = _all(con, sql, [*params, after, after, rows])
        ids = list(dict.fromkeys(r[0] for r in found))
        if len(ids) >= limit or len(found) < rows:
            return ids[:limit]
        rows *= 4


def get_job(con: Con, namespace: str, invocation_id: str, ranks: Ranks) -> JobRecord | None:
    rows = _by_ids(con, namespace, [invocation_id])
    if not rows:
        return None
    rec = dict(zip(q.JOB_COLUMNS, rows[0], strict=True))
    submitted = _rows.from_json(rec["submitted_detail"]) or {}
    seq = submitted.get("seq")
    if rec["state"] == InvocationState.PENDING:
        ahead = ranks.positions(con, namespace, rec["queue"], [invocation_id])
        rec["position"] = ahead.get(invocation_id)
    events = _all(con, q.EVENTS, [namespace, invocation_id])
    state = InvocationState(rec["state"])
    rec["attempts"], rec["stale"] = _attempts(events, finished=state in TERMINAL_STATES)
    rec["counted_attempts"] = tally(rec["attempts"]).counted
    if state is InvocationState.CANCELLED:
        rec["cancelled_by"] = _cancelled_by(events)
    if state in RETRIED_STATES:  # only these are retried: no scan on a result's wait
        # A retry is submitted after its job: only the newer ids can name it.
        retries = _all(con, q.RETRIES, [namespace, invocation_id, invocation_id])
        rec["retried_by"] = [r[0] for r in retries]
    job = _job(rec, JobDetail)
    ends = _RESULT_OUTCOMES.get(state, frozenset())
    result_epoch = next((a.epoch for a in job.attempts if a.outcome in ends), None)
    return JobRecord(
        job=job, seq=seq, result_epoch=result_epoch, submitted=submitted,
        result=_carried_result(events, result_epoch),
    )  # fmt: skip


def _carried_result(events: list[tuple[Any, ...]], epoch: int | None) -> Result | None:
    """The result the accepted outcome event of attempt ``epoch`` carries, if it does."""
    if epoch is None:
        return None
    for type_, ev_epoch, _, _, _, raw in events:
        if ev_epoch == epoch and type_ in RESULT_EVENTS:
            return inline_result(_rows.from_json(raw))
    return None


def batch_tallies(con: Con, namespace: str, batches: list[str]) -> list[BatchTally]:
    """How the invocations of each batch stand, in the order given.

    A batch's invocations have ids from its own (the first) up, which lets the scan skip
    the older history.
    """
    out = []
    for batch in batches:
        states = dict(_all(con, q.BATCH_STATES, [namespace, namespace, batch, batch]))
        if states:
            out.append(BatchTally(id=batch, size=sum(states.values()), states=states))
    return out


def _by_ids(con: Con, namespace: str, ids: list[str]) -> list[tuple[Any, ...]]:
    if not ids:
        return []
    sql = q.jobs(q.ids(len(ids))) + q.SELECT + " ORDER BY id DESC"
    return _all(con, sql, [namespace, *ids])


def queue_activity(
    con: Con, namespace: str, queue: str, since: datetime, unfinished: bool = True
) -> QueueActivity:
    [counts] = _all(con, q.WINDOW_COUNTS, [namespace, queue, since])
    submitted, succeeded, failed, cancelled = counts
    # The invocations started in the window have ids from this one up: the rest of the
    # history (older ids) is skipped by the columns' min/max statistics.
    floor = _rows.scalar(con, q.FIRST_STARTED, [namespace, queue, since])
    waits = None
    if floor is not None:
        waits = _rows.scalar(con, q.WAITS, [namespace, queue, floor, since])
    oldest = None
    if unfinished:
        oldest = _rows.scalar(con, q.OLDEST_PENDING, [namespace, queue, namespace, queue])
    p50, p95 = waits if waits and waits[0] is not None else (None, None)
    return QueueActivity(
        submitted=submitted, succeeded=succeeded, failed=failed, wait_p50_s=p50,
        wait_p95_s=p95, oldest_pending_at=oldest, cancelled=cancelled,
    )  # fmt: skip


#: The outcomes of the attempt whose result a job in this state keeps.
_RESULT_OUTCOMES = {
    InvocationState.SUCCEEDED: frozenset({"succeeded"}),
    InvocationState.FAILED: frozenset({"failed", TIMED_OUT, CRASHED}),
}
_CAUSES = frozenset(c.value for c in Cause)
_COMPLETIONS = frozenset(
    {EventType.SUCCEEDED, EventType.FAILED, EventType.RETRYING, EventType.CANCELLED}
)


def _queues_of(rows: Sequence[tuple[Any, ...] | msgspec.Struct]) -> set[tuple[str, str]]:
    """The ``(namespace, queue)`` of each event row."""
    return {
        (row.namespace, row.queue) if isinstance(row, msgspec.Struct) else (row[0], row[1])  # type: ignore[attr-defined]
        for row in rows
    }


def _all(con: Con, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    return con.execute(sql, params).fetchall()


def _job(rec: dict[str, Any], type_: type[T]) -> T:
    submitted = _rows.from_json(rec.pop("submitted_detail")) or {}
    failed = _rows.from_json(rec.pop("failed_detail")) or {}
    rec["fn"] = submitted.get("fn")
    rec["command"] = submitted.get("command")
    rec["batch"] = submitted.get("batch")
    rec["retry_of"] = submitted.get("retry_of")
    rec["resources"] = submitted.get("resources") or None
    rec["max_attempts"] = submitted.get("max_attempts") or 1
    rec["error"] = _error(failed.get("error"))
    if rec["state"] == InvocationState.FAILED and failed.get("cause") in _CAUSES:
        rec["cause"] = failed["cause"]
    if rec["state"] == InvocationState.CANCELLED and failed.get("reason"):
        rec["error"] = RemoteError(
            type="lakeshore.Cancelled", message=f"cancelled: {failed['reason']}"
        )
    return msgspec.convert(rec, type_)


def _error(raw: Any) -> RemoteError | None:
    if isinstance(raw, dict):
        try:
            return msgspec.convert(raw, RemoteError)
        except msgspec.ValidationError:
            return RemoteError(type="lakeshore.Error", message=_rows.to_json(raw))
    if raw is not None:
        return RemoteError(type="lakeshore.Error", message=str(raw))
    return None


#: An execution: ``(epoch, worker, run id)``.
_Run = tuple[int, str | None, str | None]


def _attempts(events: list[tuple[Any, ...]], finished: bool) -> tuple[list[Attempt], int]:
    """One attempt per execution, and the number of stale completions.

    An execution is one claim a daemon ran: its epoch, the worker, and the run id the daemon
    gives each claim it runs (``detail.run``). One epoch can be run twice: by a second daemon
    after an ack that was not confirmed, or by the same one after a server crash restarted
    the delivery count. Every execution is shown, each with its own number (the one its
    daemon ran it as, ``LAKESHORE_ATTEMPT``, or one past the attempt before it — never the
    delivery count, which hand-backs raise), the later ones of an epoch marked ``duplicate``.
    Events without a run id (a daemon from before run ids) are one execution per epoch and
    worker. An attempt's outcome is its accepted completion, else ``stale`` if it completed
    too late, else ``running`` for the newest attempt of an unfinished invocation, else
    ``lost`` (its daemon vanished and the claim was redelivered). A ``retrying`` completion
    of a run its stopping daemon interrupted is ``preempted`` (:mod:`lakeshore.attempts`);
    the ``failed`` event of a poison pill (reason ``lost_too_often``) ends the job, not an
    attempt: that delivery was not run.
    """
    runs: dict[_Run, dict[str, Any]] = {}
    stale = 0
    for type_, epoch, number, worker, ts, raw in events:
        detail = _rows.from_json(raw) or {}
        # A daemon's completion refused as too late; the control plane's own lost mark that
        # lost the race with the heir's claim is bookkeeping, not a completion.
        stale += type_ == EventType.STALE and detail.get("reason") != LOST_DAEMON
        if epoch is None:
            continue
        if detail.get("reason") == LOST_TOO_OFTEN:
            continue  # a poison pill's end: that delivery was not run
        key = (epoch, worker, detail.get("run")) if worker is not None else _run_of(runs, epoch)
        a = runs.get(key)
        if a is None:
            again = any(k[0] == epoch for k in runs)
            a = runs[key] = {"epoch": epoch, "worker": worker, "seq": None, "outcome": None,
                             "duplicate": again}  # fmt: skip
        a["seq"] = a["seq"] or detail.get("seq")
        if type_ in CLAIMING and "claimed_at" not in a:
            # A claim that starts at once has no ``claimed`` event: ``started`` carries it.
            a["claimed_at"], a["number"] = ts, number
            a["claim_mark"] = detail.get("mark")
        if type_ == EventType.STARTED and "started_at" not in a:
            a["started_at"] = ts
            a["code"] = detail.get("code")
        if type_ == EventType.STOPPING and "stopping" not in a:
            why, grace_s = detail.get("why") or "stopped", detail.get("grace_s") or 0.0
            a["stopping"] = {"why": why, "since": ts, "grace_s": grace_s}
        if type_ in _COMPLETIONS:
            reason = detail.get("reason") if type_ == EventType.RETRYING else None
            if reason == LOST_DAEMON and a["outcome"] is not None:
                # The control plane's lost mark after the daemon's own outcome: its daemon
                # was cut off when the run ended (the event is stamped then, published on
                # its return). The outcome, accepted or stale, says more than the loss.
                continue
            outcome = {INTERRUPTED: PREEMPTED, LOST_DAEMON: LOST}.get(reason, type_)
            if type_ in (EventType.RETRYING, EventType.FAILED) and detail.get("cause"):
                outcome = detail["cause"]  # timed_out, crashed: how it ended
                a["signal"], a["killed"] = detail.get("signal"), detail.get("killed")
            a["outcome"], a["ended_at"] = outcome, ts
            if reason == LOST_DAEMON:
                a["ended_at"] = _last_heard(detail, a, ts)
            if (error := _error(detail.get("error"))) is not None:
                a["error"] = error
            if type_ == EventType.CANCELLED and detail.get("by"):
                a["cancelled_by"] = detail["by"]
        elif type_ == EventType.STALE and detail.get("reason") == LOST_DAEMON:
            # The control plane's own lost mark, refused because the heir's claim came
            # first (the lease ran out before the lost mark): the attempt is lost all the same.
            if a["outcome"] is None:
                a["outcome"], a["ended_at"] = LOST, _last_heard(detail, a, ts)
        elif type_ == EventType.STALE and a["outcome"] in (None, LOST):
            # A daemon taken for lost that comes back and completes late: its completion was
            # refused, which says more than the loss.
            a["outcome"], a["ended_at"] = "stale", ts
    ordered = sorted(runs.values(), key=lambda a: a["epoch"])  # stable: claims in time order
    number = 0
    for a in ordered:
        # The daemon's number (LAKESHORE_ATTEMPT, its log's), else one past the last.
        number = a["attempt"] = max(a.pop("number", None) or 0, number + 1)
        if a["outcome"] is None:
            a["outcome"] = "running" if a is ordered[-1] and not finished else "lost"
    return [msgspec.convert(a, Attempt) for a in ordered], stale


def _last_heard(detail: dict[str, Any], attempt: dict[str, Any], ts: datetime) -> datetime:
    """A lost attempt's end as far as anyone knows: its daemon's last heartbeat, not the
    lost mark after it (never before the run's start)."""
    if not (heard := detail.get("last_heard")):
        return ts
    return max(datetime.fromisoformat(heard), attempt.get("started_at") or ts)


def _cancelled_by(events: list[tuple[Any, ...]]) -> str | None:
    """Who cancelled: the ``by`` of its first ``cancelled`` event that names one."""
    for type_, *_, raw in events:
        if type_ == EventType.CANCELLED and (by := (_rows.from_json(raw) or {}).get("by")):
            return by
    return None


def _run_of(runs: dict[_Run, dict[str, Any]], epoch: int) -> _Run:
    """The execution an event without a worker belongs to: the first of its epoch."""
    return next((k for k in runs if k[0] == epoch), (epoch, None, None))


class JobQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:
        _ranks: Ranks

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

        async def _read(self, namespace: str, fn: Callable[[Con], T]) -> T: ...

    async def gpu_demand(self, namespace: str, queue: str) -> list[tuple[int, str | None, int]]:
        """What the pending invocations of ``queue`` ask of GPUs: ``(gpus, gpu_type, how
        many)`` for each request of at least one GPU, as far as the history has them."""

        def work(con: Con) -> list[tuple[int, str | None, int]]:
            rows = _all(con, q.GPU_DEMAND, [namespace, queue, namespace, queue])
            return [(int(g), t, int(n)) for g, t, n in rows]

        return await self._read(namespace, work)

    async def append_invocation_events(
        self, rows: Sequence[tuple[Any, ...] | msgspec.Struct], *, batches: Sequence[int] = ()
    ) -> int:
        """Append a batch of invocation events in one statement.

        Args:
            rows: tuples in :data:`INVOCATION_EVENT_COLUMNS` order, or Structs with those
                attributes. ``detail`` is any JSON-encodable value or ``None``.
            batches: stream sequences of the event messages the rows came from, recorded
                in the same transaction (see ``recorded_batches``).

        Returns:
            The number of rows appended.

        Raises:
            ValueError: a tuple has the wrong number of values; nothing is appended.
        """
        if not rows and not batches:
            return 0

        def work(con: Con) -> int:
            if rows:
                con.execute(_rows.INSERT_INVOCATION_EVENTS, _rows.invocation_columns(rows))
            if batches:
                # Also how far the events stream is appended here (fences.events_position).
                sql = "INSERT INTO recorded_batches SELECT unnest(?::BIGINT[])"
                con.execute(sql, [list(batches)])
            return len(rows)

        changed = _queues_of(rows)

        def committed(con: Con) -> int:
            appended = _rows.transaction(con, work) if batches else work(con)
            # Said on the store's thread once committed, before any caller hears of it (and
            # even if the caller was cancelled meanwhile): no rank is kept from before.
            self._ranks.changed(changed)
            return appended

        return await self._run(committed)

    async def list_invocation_events(
        self, namespace: str, invocation_id: str
    ) -> list[tuple[Any, ...]]:
        """Events of one invocation, oldest first, as :data:`INVOCATION_EVENT_COLUMNS` tuples.

        ``detail`` is decoded back from JSON.
        """
        sql = (
            _rows.select("invocation_events", INVOCATION_EVENT_COLUMNS)
            + " WHERE namespace = ? AND invocation_id = ? ORDER BY ts, attempt"
        )

        def work(con: Con) -> list[tuple[Any, ...]]:
            rows = con.execute(sql, [namespace, invocation_id]).fetchall()
            return [(*row[:-1], _rows.from_json(row[-1])) for row in rows]

        return await self._run(work)

    async def list_jobs(
        self,
        namespace: str,
        *,
        queue: str | None = None,
        state: InvocationState | Cause | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Job]:
        """Jobs of a namespace, newest (greatest id) first.

        Args:
            queue, state: only jobs of this queue / in this state (a :class:`Cause`: failed
                jobs whose last attempt ended so).
            limit: at most this many.
            after: only ids below this one (the last id of the previous page).
        """
        return await self._read(
            namespace,
            lambda con: list_jobs(con, namespace, queue, state, limit, after, self._ranks),
        )

    async def get_job(self, namespace: str, invocation_id: str) -> JobRecord | None:
        """One job with its attempts and stale count; ``None`` when nothing is recorded."""
        return await self._read(
            namespace, lambda con: get_job(con, namespace, invocation_id, self._ranks)
        )

    async def batch_tallies(self, namespace: str, batches: list[str]) -> list[BatchTally]:
        """How the invocations of each of these batches stand (an unknown one is left out)."""
        return await self._read(namespace, lambda con: batch_tallies(con, namespace, batches))

    async def queue_activity(
        self, namespace: str, queue: str, since: datetime, *, unfinished: bool = True
    ) -> QueueActivity:
        """Counts and waits of a queue since ``since``, and its oldest pending invocation.

        Args:
            unfinished: whether the queue may have unfinished invocations; ``False`` (its
                stream holds nothing) skips the search for the oldest pending one, and
                ``oldest_pending_at`` is ``None``.
        """
        return await self._read(
            namespace, lambda con: queue_activity(con, namespace, queue, since, unfinished)
        )

    async def code_use(self, namespaces: list[str]) -> dict[str, CodeUse]:
        """How the jobs of ``namespaces`` use each code snapshot they name."""
        return await self._run(lambda con: code_use.code_use(con, namespaces))

    async def fences(self, ids: Sequence[str]) -> dict[Key, Fence]:
        """The Recorder's fences of these invocation ids (absent: never recorded)."""
        return await self._run(lambda con: fences.fences(con, ids))

    async def unfinished_fences(self) -> dict[Key, Fence]:
        """The fences of every unfinished invocation (the Recorder's state at start)."""
        return await self._run(fences.unfinished_fences)

    async def max_invocation_id(self) -> str | None:
        return await self._run(fences.max_invocation_id)

    async def recorded_batches(self, seqs: Sequence[int]) -> set[int]:
        """Which event-message sequences were appended (``append_invocation_events``)."""
        return await self._run(lambda con: fences.recorded_batches(con, seqs))

    async def prune_recorded_batches(self, ack_floor: int, last_seq: int) -> None:
        """Forget appended sequences at or below the ack floor or above the stream's end."""
        await self._run(
            lambda con: _rows.transaction(
                con, lambda c: fences.prune_recorded_batches(c, ack_floor, last_seq)
            )
        )

    async def events_position(self) -> int | None:
        """The last events-stream sequence appended to this file (``None``: never)."""
        return await self._run(fences.events_position)
