"""History as data in a real DuckDB file: points per interval, compaction into per-minute
aggregates that keep the points, and the Parquet export read back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import msgspec
import pytest

from lakeshore.model.history import HistoryPoint
from lakeshore.store import Store, open_store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(tmp_path / "h.duckdb")
    try:
        yield s
    finally:
        await s.close()


def _job(inv: str, submitted: float, started: float | None, ended: float | None, ok: bool = True):
    """Event rows of one invocation, times in seconds after :data:`T0`."""
    rows = [("ns", "q", inv, T0 + timedelta(seconds=submitted), "submitted", 0, None, None, {})]
    if started is not None:
        rows.append(("ns", "q", inv, T0 + timedelta(seconds=started), "started", 1, "w", 1, {}))
    if ended is not None:
        kind = "succeeded" if ok else "failed"
        rows.append(("ns", "q", inv, T0 + timedelta(seconds=ended), kind, 1, "w", 1, {}))
    return rows


async def _fill(store: Store) -> None:
    rows = [
        *_job("a1", 5, 7, 10),  # minute 0: wait 2, run 3
        *_job("a2", 20, 24, 30, ok=False),  # minute 0: wait 4, run 6, failed
        *_job("b1", 65, 66, 130),  # started in minute 1, ended in minute 2
        *_job("c1", 125, None, None),  # pending
    ]
    await store.append_invocation_events(rows)


async def test_points_count_each_interval(store: Store) -> None:
    await _fill(store)
    pts = await store.queue_history("ns", "q", T0, T0 + timedelta(seconds=179), 60)
    assert [p.ts for p in pts] == [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]
    assert [(p.submitted, p.started, p.succeeded, p.failed) for p in pts] == [
        (2, 2, 1, 1), (1, 1, 0, 0), (1, 0, 1, 0),
    ]  # fmt: skip
    assert pts[0].wait_p50_s == pytest.approx(3.0) and pts[0].run_p50_s == pytest.approx(4.5)
    assert pts[1].wait_p50_s == pytest.approx(1.0) and pts[1].run_p50_s is None
    assert pts[2].run_p50_s == pytest.approx(64.0) and pts[2].wait_p50_s is None


def _event(inv: str, at: float, kind: str, epoch: int | None = None):
    worker = None if epoch is None else "w"
    return ("ns", "q", inv, T0 + timedelta(seconds=at), kind, epoch or 0, worker, epoch, {})


async def test_points_show_a_burst_of_pending_that_came_and_went_within_an_interval(
    store: Store,
) -> None:
    burst = [row for i in range(5) for row in _job(f"b{i}", 1 + i, 10 + i, 11 + i)]
    retried = [
        *_job("r1", 61, 62, None),
        _event("r1", 63, "retrying", 1),  # back to pending, beside r2
        *_job("r2", 63.5, None, None),
        _event("r1", 64, "started", 2),
    ]
    cancelled = [
        *_job("c1", 121, None, None),
        _event("c1", 122, "cancelled"),  # the control plane's: no epoch
        *_job("c2", 123, None, None),
    ]
    await store.append_invocation_events([*burst, *retried, *cancelled])
    until = T0 + timedelta(seconds=179)
    pts = await store.queue_history("ns", "q", T0, until, 60)
    assert [(p.submitted, p.started, p.succeeded) for p in pts] == [(5, 5, 5), (2, 2, 0), (2, 0, 0)]
    assert [p.pending_rise for p in pts] == [5, 2, 1]
    # How far each minute moved the counts, retries and cancels included: walked back from
    # the current ones (pending r2 and c2, running r1), every minute's level is exact.
    assert [(p.pending_change, p.running_change) for p in pts] == [(0, 0), (1, 1), (1, 0)]
    assert [p.pending_rise for p in await store.queue_history("ns", "q", T0, until, 180)] == [5]


def _without_rise(points: list[HistoryPoint]) -> list[HistoryPoint]:
    return [msgspec.structs.replace(p, pending_rise=0) for p in points]


async def test_compaction_keeps_the_points_and_unfinished_rows(store: Store) -> None:
    await _fill(store)
    until = T0 + timedelta(seconds=179)
    before = await store.queue_history("ns", "q", T0, until, 60)
    done = await store.compact_history(T0 + timedelta(hours=1))
    assert (done.invocations, done.rows) == (3, 9)
    # The compacted minutes keep every count, not how far pending rose within them.
    after = await store.queue_history("ns", "q", T0, until, 60)
    assert _without_rise(after) == _without_rise(before)
    assert await store.list_invocation_events("ns", "a1") == []
    assert len(await store.list_invocation_events("ns", "c1")) == 1  # pending: kept
    wide = await store.queue_history("ns", "q", T0, until, 180)
    assert (wide[0].submitted, wide[0].succeeded, wide[0].failed) == (4, 2, 1)
    gone = await store.compact_history(None, T0 + timedelta(hours=1))
    assert gone.dropped_minutes == done.minutes
    assert sum(p.succeeded for p in await store.queue_history("ns", "q", T0, until, 60)) == 0


async def test_export_writes_every_column_as_parquet(store: Store, tmp_path: Path) -> None:
    await _fill(store)
    out = tmp_path / "x.parquet"
    assert await store.export_history("ns", None, T0 + timedelta(seconds=60), out) == 4
    rows = duckdb.sql(f"SELECT invocation_id, type FROM '{out}' ORDER BY ts").fetchall()
    assert rows == [
        ("b1", "submitted"),
        ("b1", "started"),
        ("c1", "submitted"),
        ("b1", "succeeded"),
    ]
