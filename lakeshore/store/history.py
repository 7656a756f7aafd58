"""History as data: a queue's points per interval, compaction into per-minute aggregates,
and the Parquet export of the invocation events (SQL in :mod:`.history_sql`).

The functions run on the store's thread; :class:`HistoryQueries`, mixed into
:class:`~lakeshore.store.duckdb.Store`, exposes them as coroutines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import duckdb

from lakeshore.model.history import Compacted, HistoryPoint
from lakeshore.store import _rows
from lakeshore.store import history_sql as q

if TYPE_CHECKING:
    from lakeshore.store.ranks import Ranks

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class _Point:
    counts: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    #: weighted sums and weights: wait p50, wait p95, wait n, run p50, run n
    wait50: float = 0.0
    wait95: float = 0.0
    wait_n: int = 0
    run50: float = 0.0
    run_n: int = 0
    #: how far pending rose within the interval (raw events only: see HistoryPoint)
    pending_rise: int = 0
    #: how much the pending and running counts moved over the interval
    pending_change: int = 0
    running_change: int = 0


def bucket_start(at: datetime, every_s: float) -> datetime:
    """The start of the ``every_s`` interval holding ``at`` (aligned on the Unix epoch)."""
    step = timedelta(seconds=every_s)
    return _EPOCH + ((at - _EPOCH) // step) * step


def points(
    con: Con, namespace: str, queue: str, since: datetime, until: datetime, every_s: float
) -> list[HistoryPoint]:
    start = bucket_start(since, every_s)
    step = timedelta(seconds=every_s)
    acc: dict[datetime, _Point] = {}
    at = start
    while at <= until:
        acc[at] = _Point()
        at += step
    # ``at`` is now the end of the interval holding ``until``: all of it is counted (an
    # event stamped moments after ``until`` by a daemon's clock included).
    until = at
    window = [namespace, queue, start, until]

    def slot(b: datetime) -> _Point:
        return acc.setdefault(b.astimezone(UTC), _Point())

    for b, *counts, moved, ran, rise in con.execute(q.COUNTS, [every_s, *window]).fetchall():
        p = slot(b)
        p.counts = [x + y for x, y in zip(p.counts, counts, strict=True)]
        p.pending_rise = int(rise)
        p.pending_change += int(moved or 0)
        p.running_change += int(ran or 0)
    params = [namespace, queue, namespace, queue, start, every_s, start, until, every_s]
    for kind, b, qs, n in con.execute(q.DURATIONS, [*params, start, until]).fetchall():
        p = slot(b)
        if kind == "wait":
            p.wait50, p.wait95, p.wait_n = qs[0] * n, qs[1] * n, n
        else:
            p.run50, p.run_n = qs[0] * n, n
    for b, *row in con.execute(q.AGGREGATES, [every_s, *window]).fetchall():
        p = slot(b)
        p.counts = [x + int(y or 0) for x, y in zip(p.counts, row[:4], strict=True)]
        w50, w95, wn, r50, rn, moved, ran = row[4:]
        p.pending_change += int(moved or 0)
        p.running_change += int(ran or 0)
        p.wait50, p.wait95, p.wait_n = p.wait50 + (w50 or 0), p.wait95 + (w95 or 0), p.wait_n + wn
        p.run50, p.run_n = p.run50 + (r50 or 0), p.run_n + rn
    return [_point(at, p) for at, p in sorted(acc.items())]


def _point(at: datetime, p: _Point) -> HistoryPoint:
    def mean(total: float, n: int) -> float | None:
        return round(total / n, 6) if n else None

    submitted, started, succeeded, failed = p.counts
    return HistoryPoint(
        ts=at, submitted=submitted, started=started, succeeded=succeeded, failed=failed,
        wait_p50_s=mean(p.wait50, p.wait_n), wait_p95_s=mean(p.wait95, p.wait_n),
        run_p50_s=mean(p.run50, p.run_n), pending_rise=p.pending_rise,
        pending_change=p.pending_change, running_change=p.running_change,
    )  # fmt: skip


def compact(con: Con, raw_before: datetime | None, minutes_before: datetime | None) -> Compacted:
    """Aggregate then delete the finished invocations whose every event is older than
    ``raw_before``; delete aggregates older than ``minutes_before``. One transaction."""
    invocations = rows = minutes = dropped = 0
    if raw_before is not None:
        con.execute(q.DOOMED, [raw_before])
        invocations = _rows.scalar(con, "SELECT count(*) FROM doomed", []) or 0
        if invocations:
            minutes = _rows.scalar(con, q.COMPACT, []) or 0
            rows = _rows.scalar(con, q.DELETE_DOOMED, []) or 0
        con.execute("DROP TABLE doomed")
    if minutes_before is not None:
        dropped = _rows.scalar(con, q.DELETE_MINUTES, [minutes_before]) or 0
    return Compacted(invocations=invocations, rows=rows, minutes=minutes, dropped_minutes=dropped)


def export(con: Con, namespace: str, queue: str | None, since: datetime, path: Path) -> int:
    # The path is the server's own temporary file, never a caller's value; COPY's target
    # cannot be a parameter.
    target = str(path).replace("'", "''")
    return _rows.scalar(con, q.EXPORT.format(path=target), [namespace, queue, since]) or 0


class HistoryQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:
        _ranks: Ranks

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

        async def _read(self, namespace: str, fn: Callable[[Con], T]) -> T: ...

    async def queue_history(
        self, namespace: str, queue: str, since: datetime, until: datetime, every_s: float
    ) -> list[HistoryPoint]:
        """One point per ``every_s`` interval from the one holding ``since`` to the one
        holding ``until``: raw events merged with the compacted per-minute aggregates."""
        return await self._read(
            namespace, lambda con: points(con, namespace, queue, since, until, every_s)
        )

    async def compact_history(
        self, raw_before: datetime | None, minutes_before: datetime | None = None
    ) -> Compacted:
        """Fold finished invocations older than ``raw_before`` into per-minute aggregates
        and delete their events (never an unfinished invocation's); delete aggregates
        older than ``minutes_before``. ``None``: keep them."""

        def committed(con: Con) -> Compacted:
            done = _rows.transaction(con, lambda c: compact(c, raw_before, minutes_before))
            self._ranks.changed_all()  # once committed (see ``append_invocation_events``)
            return done

        return await self._run(committed)

    async def export_history(
        self, namespace: str, queue: str | None, since: datetime, path: Path
    ) -> int:
        """Write the namespace's (``queue``'s) events since ``since`` to ``path`` as
        Parquet, every column; answers the number of rows."""
        return await self._read(namespace, lambda con: export(con, namespace, queue, since, path))


__all__ = ["HistoryQueries", "bucket_start"]
