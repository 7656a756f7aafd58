"""Job queries over the invocation history: jobs, attempts and a queue's recent activity.

The history is the append-only ``invocation_events`` table. A job's current state is
derived from its accepted (non-``stale``) events exactly as :mod:`lakeshore.fencing`
derives it in memory (the SQL fragments come from :mod:`.fences`): the accepted terminal
event if any, else the greatest ``(epoch, rank)`` of the non-terminal ones.

The functions run on the store's thread; :class:`JobQueries`, mixed into
:class:`~lakeshore.store.duckdb.Store`, exposes them and :mod:`.fences` as coroutines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
import msgspec

from lakeshore.fencing import Fence, Key
from lakeshore.model import (
    TERMINAL_STATES,
    Attempt,
    EventType,
    InvocationState,
    Job,
    JobDetail,
    RemoteError,
)
from lakeshore.store import _rows, fences
from lakeshore.store._rows import INVOCATION_EVENT_COLUMNS
from lakeshore.store.fences import ACCEPTED, FENCE_COLUMNS, STATE, TERMINAL_TYPES
from lakeshore.store.port import JobRecord, QueueActivity

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")


def _jobs(where: str) -> str:
    """A CTE ``jobs``: one row per invocation whose events match ``where``."""
    return f"""WITH agg AS (
        SELECT namespace, invocation_id AS id, any_value(queue) AS queue, {FENCE_COLUMNS},
            arg_min(detail, ts) FILTER (WHERE type = 'submitted') AS submitted_detail,
            min(ts) FILTER (WHERE type = 'submitted') AS submitted_at,
            min(ts) FILTER (WHERE type = 'started') AS started_at,
            max(ts) FILTER (WHERE type IN {TERMINAL_TYPES}) AS finished_at,
            max(attempt) AS attempt,
            arg_max(worker, coalesce(epoch, 0))
                FILTER (WHERE worker IS NOT NULL AND type IN ('claimed', 'started')) AS worker,
            arg_max(detail, ts) FILTER (WHERE type IN ('failed', 'cancelled')) AS failed_detail
        FROM invocation_events WHERE {ACCEPTED} AND {where}
        GROUP BY namespace, invocation_id
    ), jobs AS (
        SELECT *, {STATE} AS state,
            coalesce(TRY_CAST(json_extract_string(submitted_detail, '$.priority') AS INTEGER), 0)
                AS priority
        FROM agg
    )"""


def _ids(n: int) -> str:
    return f"namespace = ? AND invocation_id IN ({', '.join('?' * n)})"


# Unfinished invocations of a namespace (and queue): the history of finished ones, almost
# all of it, is skipped by the anti-join before anything is aggregated.
_UNFINISHED = f"""namespace = ? AND queue = coalesce(?, queue) AND invocation_id NOT IN (
    SELECT invocation_id FROM invocation_events WHERE namespace = ? AND type IN {TERMINAL_TYPES})"""
_JOB_COLUMNS = ("namespace", "id", "queue", "state", "priority", "attempt", "worker",
                "submitted_at", "started_at", "finished_at", "submitted_detail",
                "failed_detail")  # fmt: skip
_SELECT = f"SELECT {', '.join(_JOB_COLUMNS)} FROM jobs"
_PAGE = " AND (? IS NULL OR invocation_id < ?) ORDER BY invocation_id DESC LIMIT ?"
# Newest ids first: any state, or one terminal state (its event names it; one per job).
_NEWEST_IDS = (
    "SELECT DISTINCT invocation_id FROM invocation_events"
    f" WHERE namespace = ? AND queue = coalesce(?, queue) AND {ACCEPTED}" + _PAGE
)
_NEWEST_IDS_ENDED = (
    "SELECT DISTINCT invocation_id FROM invocation_events"
    " WHERE namespace = ? AND queue = coalesce(?, queue) AND type = ?" + _PAGE
)
_LIST_UNFINISHED = (
    _jobs(_UNFINISHED) + _SELECT
    + " WHERE state = ? AND (? IS NULL OR id < ?) ORDER BY id DESC LIMIT ?"
)  # fmt: skip
# Ahead of a pending job: pending jobs of its queue of higher priority, then older ones.
_POSITIONS = (
    _jobs(_UNFINISHED)
    + """SELECT id, row_number() OVER (
    ORDER BY priority DESC, submitted_at NULLS LAST, id) - 1 FROM jobs WHERE state = 'pending'"""
)
_OLDEST_PENDING = _jobs(_UNFINISHED) + "SELECT min(submitted_at) FROM jobs WHERE state = 'pending'"
_EVENTS = (
    "SELECT type, epoch, attempt, worker, ts, detail FROM invocation_events"
    " WHERE namespace = ? AND invocation_id = ? ORDER BY ts"
)

_WINDOW_COUNTS = """SELECT
    count(DISTINCT invocation_id) FILTER (WHERE type = 'submitted'),
    count(*) FILTER (WHERE type = 'succeeded'),
    count(*) FILTER (WHERE type = 'failed')
    FROM invocation_events WHERE namespace = ? AND queue = ? AND ts >= ?"""
# Wait = submitted → first started, for the invocations whose first start is in the window.
_WAITS = """WITH w AS (
        SELECT DISTINCT invocation_id FROM invocation_events
        WHERE namespace = ? AND queue = ? AND type = 'started' AND ts >= ?
    ), f AS (
        SELECT min(ts) FILTER (WHERE type = 'started') AS first_started,
            min(ts) FILTER (WHERE type = 'submitted') AS submitted_at
        FROM invocation_events
        WHERE namespace = ? AND queue = ? AND type IN ('started', 'submitted')
            AND invocation_id IN (SELECT invocation_id FROM w)
        GROUP BY invocation_id
    )
    SELECT quantile_cont(epoch(first_started - submitted_at), [0.5, 0.95])
    FROM f WHERE first_started >= ? AND submitted_at IS NOT NULL"""


def list_jobs(
    con: Con,
    namespace: str,
    queue: str | None,
    state: InvocationState | None,
    limit: int,
    after: str | None,
) -> list[Job]:
    page = [after, after, limit]
    if state is None or state in TERMINAL_STATES:
        # Pick the page's ids with a cheap scan, then aggregate those alone.
        sql, params = (_NEWEST_IDS, []) if state is None else (_NEWEST_IDS_ENDED, [state.value])
        ids = [r[0] for r in _all(con, sql, [namespace, queue, *params, *page])]
        rows = _by_ids(con, namespace, ids) if ids else []
    else:
        rows = _all(con, _LIST_UNFINISHED, [namespace, queue, namespace, state.value, *page])
    recs = [dict(zip(_JOB_COLUMNS, r, strict=True)) for r in rows]
    waiting = {r["queue"] for r in recs if r["state"] == InvocationState.PENDING}
    ahead = {name: positions(con, namespace, name) for name in waiting}
    for r in recs:
        if r["queue"] in ahead:
            r["position"] = ahead[r["queue"]].get(r["id"])
    return [_job(r, Job) for r in recs]


def positions(con: Con, namespace: str, queue: str) -> dict[str, int]:
    """Pending invocation id → how many pending invocations of ``queue`` are ahead of it."""
    return dict(_all(con, _POSITIONS, [namespace, queue, namespace]))


def get_job(con: Con, namespace: str, invocation_id: str) -> JobRecord | None:
    rows = _by_ids(con, namespace, [invocation_id])
    if not rows:
        return None
    rec = dict(zip(_JOB_COLUMNS, rows[0], strict=True))
    seq = (_rows.from_json(rec["submitted_detail"]) or {}).get("seq")
    if rec["state"] == InvocationState.PENDING:
        rec["position"] = positions(con, namespace, rec["queue"]).get(invocation_id)
    events = _all(con, _EVENTS, [namespace, invocation_id])
    state = InvocationState(rec["state"])
    rec["attempts"], rec["stale"] = _attempts(events, finished=state in TERMINAL_STATES)
    job = _job(rec, JobDetail)
    result_epoch = next(
        (a.epoch for a in job.attempts if a.outcome == state and state in _RESULT_STATES), None
    )
    return JobRecord(job=job, seq=seq, result_epoch=result_epoch)


def _by_ids(con: Con, namespace: str, ids: list[str]) -> list[tuple[Any, ...]]:
    sql = _jobs(_ids(len(ids))) + _SELECT + " ORDER BY id DESC"
    return _all(con, sql, [namespace, *ids])


def queue_activity(con: Con, namespace: str, queue: str, since: datetime) -> QueueActivity:
    submitted, succeeded, failed = _all(con, _WINDOW_COUNTS, [namespace, queue, since])[0]
    waits = _rows.scalar(con, _WAITS, [namespace, queue, since, namespace, queue, since])
    oldest = _rows.scalar(con, _OLDEST_PENDING, [namespace, queue, namespace])
    p50, p95 = waits if waits and waits[0] is not None else (None, None)
    return QueueActivity(
        submitted=submitted, succeeded=succeeded, failed=failed, wait_p50_s=p50,
        wait_p95_s=p95, oldest_pending_at=oldest,
    )  # fmt: skip


_RESULT_STATES = frozenset({InvocationState.SUCCEEDED, InvocationState.FAILED})
_COMPLETIONS = frozenset(
    {EventType.SUCCEEDED, EventType.FAILED, EventType.RETRYING, EventType.CANCELLED}
)


def _all(con: Con, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    return con.execute(sql, params).fetchall()


def _job(rec: dict[str, Any], type_: type[T]) -> T:
    submitted = _rows.from_json(rec.pop("submitted_detail")) or {}
    failed = _rows.from_json(rec.pop("failed_detail")) or {}
    rec["fn"] = submitted.get("fn")
    rec["command"] = submitted.get("command")
    rec["max_attempts"] = submitted.get("max_attempts") or 1
    rec["error"] = _error(failed.get("error"))
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


def _attempts(events: list[tuple[Any, ...]], finished: bool) -> tuple[list[Attempt], int]:
    """One attempt per execution, and the number of stale events.

    An execution is a claim: its epoch and the worker that ran it. Two workers may run the
    same epoch (an ack that was not confirmed, or a delivery count restarted by a server
    crash): both are shown, the later one marked ``duplicate``. An attempt's outcome is its
    accepted completion, else ``stale`` if it completed too late, else ``running`` for the
    newest attempt of an unfinished invocation, else ``lost`` (its daemon vanished and the
    claim was redelivered).
    """
    runs: dict[tuple[int, str | None], dict[str, Any]] = {}
    stale = 0
    for type_, epoch, attempt, worker, ts, detail in events:
        stale += type_ == EventType.STALE
        if epoch is None:
            continue
        key = (epoch, worker) if worker is not None else _run_of(runs, epoch)
        a = runs.get(key)
        if a is None:
            again = any(e == epoch for e, _ in runs)
            a = runs[key] = {"attempt": attempt, "epoch": epoch, "worker": worker, "seq": None,
                             "outcome": None, "duplicate": again}  # fmt: skip
        a["attempt"] = max(a["attempt"], attempt)
        a["seq"] = a["seq"] or (_rows.from_json(detail) or {}).get("seq")
        if type_ == EventType.STARTED and "started_at" not in a:
            a["started_at"] = ts
        if type_ in _COMPLETIONS:
            a["outcome"], a["ended_at"] = type_, ts
        elif type_ == EventType.STALE and a["outcome"] is None:
            a["outcome"], a["ended_at"] = "stale", ts
    ordered = sorted(runs.values(), key=lambda a: a["epoch"])  # stable: claims in time order
    for a in ordered:
        if a["outcome"] is None:
            a["outcome"] = "running" if a is ordered[-1] and not finished else "lost"
    return [msgspec.convert(a, Attempt) for a in ordered], stale


def _run_of(runs: dict[tuple[int, str | None], dict[str, Any]], epoch: int) -> tuple[int, Any]:
    """The execution an event without a worker belongs to: the first of its epoch."""
    return next((k for k in runs if k[0] == epoch), (epoch, None))


class JobQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

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
                sql = "INSERT INTO recorded_batches SELECT unnest(?::BIGINT[])"
                con.execute(sql, [list(batches)])
            return len(rows)

        if not batches:
            return await self._run(work)
        return await self._run(lambda con: _rows.transaction(con, work))

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
        state: InvocationState | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Job]:
        """Jobs of a namespace, newest (greatest id) first.

        Args:
            queue, state: only jobs of this queue / in this state.
            limit: at most this many.
            after: only ids below this one (the last id of the previous page).
        """
        return await self._run(lambda con: list_jobs(con, namespace, queue, state, limit, after))

    async def get_job(self, namespace: str, invocation_id: str) -> JobRecord | None:
        """One job with its attempts and stale count; ``None`` when nothing is recorded."""
        return await self._run(lambda con: get_job(con, namespace, invocation_id))

    async def queue_activity(self, namespace: str, queue: str, since: datetime) -> QueueActivity:
        """Counts and waits of a queue since ``since``, and its oldest pending invocation."""
        return await self._run(lambda con: queue_activity(con, namespace, queue, since))

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
        await self._run(lambda con: fences.prune_recorded_batches(con, ack_floor, last_seq))
