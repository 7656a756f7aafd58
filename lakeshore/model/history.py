"""History as data: a queue's activity per interval (``GET …/queues/:name/history``) and
what a compaction of the history did."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct


class HistoryPoint(Struct, frozen=True, kw_only=True):
    """One interval of a queue's history (raw events and compacted minutes merged)."""

    #: start of the interval (UTC)
    ts: datetime
    #: invocations submitted in the interval
    submitted: int = 0
    #: attempts started in the interval
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    #: submitted → first started, of the invocations first started in the interval (s)
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    #: last started → succeeded/failed, of the invocations that ended in the interval (s)
    run_p50_s: float | None = None
    #: how far the pending count rose within the interval above its level at the
    #: interval's start (up on a submit or a retry, down on a start, a drop or a pending
    #: invocation's cancel): with that level, the interval's peak, so a burst that came and
    #: went between two points' ends still shows. From the raw events only: 0 in a minute
    #: whose events were compacted
    pending_rise: int = 0
    #: how much the pending count moved over the interval (up on a submit or a retry, down
    #: on a start, a drop or a pending invocation's cancel), compacted minutes included: the
    #: level at any interval's end is the current count less the changes after it
    pending_change: int = 0
    #: how much the running count moved (up on a start, down when a started run ends)
    running_change: int = 0


class QueueHistory(Struct, frozen=True, kw_only=True):
    """The answer of ``GET /v1/namespaces/:ns/queues/:name/history``."""

    queue: str
    namespace: str
    #: width of each interval, in seconds
    every_s: float
    #: oldest first, one per interval, empty intervals included
    points: list[HistoryPoint]


class Compacted(Struct, frozen=True, kw_only=True):
    """What one compaction of the invocation history did."""

    #: finished invocations folded into per-minute aggregates, then deleted
    invocations: int = 0
    #: invocation event rows deleted
    rows: int = 0
    #: per-minute aggregate rows written
    minutes: int = 0
    #: per-minute aggregate rows deleted (older than their own retention)
    dropped_minutes: int = 0


__all__ = ["Compacted", "HistoryPoint", "QueueHistory"]
