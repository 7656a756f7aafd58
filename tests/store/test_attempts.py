"""A job's attempts: one per execution, even when two executions share an epoch (against a
real DuckDB file)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakeshore.attempts import LOST_DAEMON
from lakeshore.model import Cause, EventType, InvocationState
from lakeshore.store import Store, open_store

T0 = datetime(2025, 3, 4, tzinfo=UTC)
NS, Q, INV = "ns", "q", "0190aaaa-0000-7000-8000-000000000000"
E = EventType


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(tmp_path / "s.duckdb")
    try:
        yield s
    finally:
        await s.close()


async def _history(store: Store, *steps: tuple[EventType, int, str, str | None]) -> Any:
    """Record ``submitted`` then ``(type, epoch, worker, run id)`` steps one second apart;
    the job as the store reads it back."""
    rows: list[tuple[Any, ...]] = [(NS, Q, INV, T0, E.SUBMITTED, 0, None, None, {"seq": 1})]
    for n, (type_, epoch, worker, run) in enumerate(steps, 1):
        detail: dict[str, Any] = {"seq": 1, **({"run": run} if run else {})}
        if type_ is E.STALE:
            detail |= {"stale_type": "succeeded", "stale_reason": "already succeeded"}
        rows.append((NS, Q, INV, T0 + timedelta(seconds=n), type_, epoch, worker, epoch, detail))
    await store.append_invocation_events(rows)
    record = await store.get_job(NS, INV)
    assert record is not None
    return record


def _shown(record: Any) -> list[tuple[int, int | None, str | None, str, bool]]:
    return [(a.attempt, a.epoch, a.worker, a.outcome, a.duplicate) for a in record.job.attempts]


async def test_two_executions_of_one_epoch_by_one_daemon_are_two_attempts(store: Store) -> None:
    # The daemon ran epoch 1 and acked; a crash lost the ack and restarted the delivery
    # count, so the same daemon ran it again as epoch 1.
    record = await _history(
        store,
        (E.CLAIMED, 1, "w", "r1"), (E.STARTED, 1, "w", "r1"), (E.SUCCEEDED, 1, "w", "r1"),
        (E.CLAIMED, 1, "w", "r2"), (E.STARTED, 1, "w", "r2"), (E.STALE, 1, "w", "r2"),
    )  # fmt: skip
    assert _shown(record) == [(1, 1, "w", "succeeded", False), (2, 1, "w", "stale", True)]
    first, second = record.job.attempts
    assert first.ended_at < second.started_at < second.ended_at
    assert (record.job.state, record.job.stale, record.result_epoch) == ("succeeded", 1, 1)


async def test_an_outcome_stamped_before_its_daemons_lost_mark_is_still_the_attempts(
    store: Store,
) -> None:
    # A daemon cut off from NATS finished its run (its event stamped then), was marked lost,
    # and published the outcome on its return, before the heir ran: the outcome was accepted
    # and the heir's completion refused. The attempt is the one that succeeded, not lost.
    def row(n: int, type_: EventType, epoch: int, by: str | None, **detail: Any) -> Any:
        at = T0 + timedelta(seconds=n)
        return (NS, Q, INV, at, type_, epoch, by, epoch, {"seq": 1, **detail})

    await store.append_invocation_events([
        (NS, Q, INV, T0, E.SUBMITTED, 0, None, None, {"seq": 1}),
        row(1, E.CLAIMED, 1, "cut", run="r1"), row(2, E.STARTED, 1, "cut", run="r1"),
        row(3, E.SUCCEEDED, 1, "cut", run="r1"),
        row(4, E.RETRYING, 1, None, reason=LOST_DAEMON, worker="cut"),
        row(5, E.CLAIMED, 2, "heir", run="r2"), row(6, E.STARTED, 2, "heir", run="r2"),
        row(7, E.STALE, 2, "heir", run="r2", stale_type="succeeded"),
    ])  # fmt: skip
    record = await store.get_job(NS, INV)
    assert record is not None
    assert _shown(record) == [(1, 1, "cut", "succeeded", False), (2, 2, "heir", "stale", False)]
    assert record.job.attempts[0].ended_at == T0 + timedelta(seconds=3)
    assert (record.job.state, record.result_epoch) == ("succeeded", 1)


async def test_overlapping_executions_of_one_epoch_keep_their_own_events(store: Store) -> None:
    record = await _history(
        store,
        (E.CLAIMED, 1, "w", "r1"), (E.STARTED, 1, "w", "r1"),
        (E.CLAIMED, 1, "w", "r2"), (E.STARTED, 1, "w", "r2"),
        (E.SUCCEEDED, 1, "w", "r2"), (E.STALE, 1, "w", "r1"),
    )  # fmt: skip
    assert _shown(record) == [(1, 1, "w", "stale", False), (2, 1, "w", "succeeded", True)]
    first, second = record.job.attempts
    assert (first.started_at, second.started_at) == (
        T0 + timedelta(seconds=2),
        T0 + timedelta(seconds=4),
    )
    assert record.result_epoch == 1


async def test_an_unfinished_second_execution_is_the_running_one(store: Store) -> None:
    record = await _history(
        store,
        (E.CLAIMED, 1, "w", "r1"), (E.STARTED, 1, "w", "r1"), (E.RETRYING, 1, "w", "r1"),
        (E.CLAIMED, 1, "w", "r2"), (E.STARTED, 1, "w", "r2"),
    )  # fmt: skip
    assert _shown(record) == [(1, 1, "w", "retrying", False), (2, 1, "w", "running", True)]


async def test_events_without_a_run_id_are_one_execution_per_epoch_and_daemon(
    store: Store,
) -> None:
    # Events of a daemon from before run ids; epoch 1 of another daemon too, and no
    # event of epochs 2 and 3 recorded: the numbers follow the epochs where they can.
    record = await _history(
        store,
        (E.CLAIMED, 1, "w", None), (E.STARTED, 1, "w", None), (E.RETRYING, 1, "w", None),
        (E.CLAIMED, 1, "v", None), (E.STALE, 1, "v", None),
        (E.CLAIMED, 4, "w", None), (E.STARTED, 4, "w", None), (E.SUCCEEDED, 4, "w", None),
    )  # fmt: skip
    assert _shown(record) == [
        (1, 1, "w", "retrying", False), (2, 1, "v", "stale", True),
        (4, 4, "w", "succeeded", False),
    ]  # fmt: skip


async def test_an_interrupted_attempt_is_preempted_a_vanished_one_lost_and_neither_counts(
    store: Store,
) -> None:
    def at(n: int, type_: EventType, epoch: int, worker: str, **detail: Any) -> tuple[Any, ...]:
        body = {"seq": 1, "run": f"r{epoch}", **detail}
        return (NS, Q, INV, T0 + timedelta(seconds=n), type_, epoch, worker, epoch, body)

    error = {"type": "builtins.ValueError", "message": "bad"}
    rows = [
        (NS, Q, INV, T0, E.SUBMITTED, 0, None, None, {"seq": 1, "max_attempts": 2}),
        at(1, E.CLAIMED, 1, "a"), at(2, E.STARTED, 1, "a"),
        at(3, E.RETRYING, 1, "a", reason="interrupted"),
        at(4, E.CLAIMED, 2, "b"), at(5, E.STARTED, 2, "b"),
        at(6, E.CLAIMED, 3, "c"), at(7, E.STARTED, 3, "c"),
        at(8, E.RETRYING, 3, "c", error=error, delay_s=1.0),
        at(9, E.CLAIMED, 4, "d"), at(10, E.STARTED, 4, "d"), at(11, E.SUCCEEDED, 4, "d"),
    ]  # fmt: skip
    await store.append_invocation_events(rows)
    record = await store.get_job(NS, INV)
    assert record is not None
    outcomes = [a.outcome for a in record.job.attempts]
    assert outcomes == ["preempted", "lost", "retrying", "succeeded"]
    assert (record.job.counted_attempts, record.job.max_attempts) == (2, 2)


async def test_a_poison_pills_end_is_the_jobs_failure_not_an_attempt(store: Store) -> None:
    rows: list[tuple[Any, ...]] = [(NS, Q, INV, T0, E.SUBMITTED, 0, None, None, {"seq": 1})]
    for epoch in (1, 2, 3):
        for k, type_ in enumerate((E.CLAIMED, E.STARTED)):
            ts = T0 + timedelta(seconds=2 * epoch + k)
            rows.append((NS, Q, INV, ts, type_, epoch, f"w{epoch}", epoch, {"run": f"r{epoch}"}))
    error = {"type": "lakeshore.LostTooOften", "message": "lost 3 attempts in a row"}
    detail = {"seq": 1, "reason": "lost_too_often", "error": error}
    rows.append((NS, Q, INV, T0 + timedelta(seconds=9), E.FAILED, 4, "w4", 4, detail))
    await store.append_invocation_events(rows)
    record = await store.get_job(NS, INV)
    assert record is not None
    assert [a.outcome for a in record.job.attempts] == ["lost", "lost", "lost"]
    assert record.job.state == "failed" and record.job.counted_attempts == 0
    assert record.job.error is not None and record.job.error.type == "lakeshore.LostTooOften"


async def test_the_planes_lost_mark_refused_after_the_heirs_claim_still_reads_lost(
    store: Store,
) -> None:
    """The lease ran out before the lost mark: the heir claimed first, so the plane's own
    ``retrying`` (reason lost) was refused as stale — the attempt is lost, not stale, and
    ends at the daemon's last heartbeat; the job counts no stale completion (no daemon
    completed late)."""
    heard = T0 + timedelta(seconds=2)
    lost = {"seq": 1, "reason": "lost", "last_heard": heard.isoformat(),
            "stale_type": "retrying", "stale_reason": "superseded by epoch 2"}  # fmt: skip
    rows = [
        (NS, Q, INV, T0, E.SUBMITTED, 0, None, None, {"seq": 1}),
        (NS, Q, INV, T0 + timedelta(seconds=1), E.CLAIMED, 1, "a", 1, {"seq": 1, "run": "r1"}),
        (NS, Q, INV, T0 + timedelta(seconds=1), E.STARTED, 1, "a", 1, {"seq": 1, "run": "r1"}),
        (NS, Q, INV, T0 + timedelta(seconds=5), E.CLAIMED, 2, "b", 2, {"seq": 1, "run": "r2"}),
        (NS, Q, INV, T0 + timedelta(seconds=6), E.STALE, 1, None, 1, lost),
        (NS, Q, INV, T0 + timedelta(seconds=7), E.SUCCEEDED, 2, "b", 2, {"seq": 1, "run": "r2"}),
    ]  # fmt: skip
    await store.append_invocation_events(rows)
    record = await store.get_job(NS, INV)
    assert record is not None
    assert [(a.outcome, a.worker) for a in record.job.attempts] == [
        ("lost", "a"), ("succeeded", "b")
    ]  # fmt: skip
    assert record.job.attempts[0].ended_at == heard
    assert record.job.counted_attempts == 1 and record.job.stale == 0


async def test_failed_jobs_are_listed_and_counted_by_their_cause(store: Store) -> None:
    """``jobs ls --state timed_out`` lists the failed jobs whose last attempt timed out; a
    batch's tally counts a failed job under its cause."""
    ids = [f"0190aaaa-0000-7000-8000-00000000000{i}" for i in range(4)]
    causes = [{"cause": "timed_out", "killed": True}, {"cause": "crashed", "signal": "SIGSEGV"},
              {}, None]  # fmt: skip
    rows: list[tuple[Any, ...]] = []
    for n, (inv, cause) in enumerate(zip(ids, causes, strict=True)):
        at = T0 + timedelta(seconds=10 * n)
        submit = {"seq": n + 1, "batch": ids[0]}
        rows.append((NS, Q, inv, at, E.SUBMITTED, 0, None, None, submit))
        run = {"seq": n + 1, "run": f"r{n}"}
        rows.append((NS, Q, inv, at + timedelta(seconds=1), E.CLAIMED, 1, "w", 1, run))
        rows.append((NS, Q, inv, at + timedelta(seconds=1), E.STARTED, 1, "w", 1, run))
        end = E.SUCCEEDED if cause is None else E.FAILED
        rows.append(
            (NS, Q, inv, at + timedelta(seconds=2), end, 1, "w", 1, {**run, **(cause or {})})
        )
    await store.append_invocation_events(rows)
    for cause, expected in ((Cause.TIMED_OUT, [ids[0]]), (Cause.CRASHED, [ids[1]])):
        listed = await store.list_jobs(NS, state=cause)
        assert [(j.id, j.state, j.cause) for j in listed] == [(expected[0], "failed", cause)]
    failed = await store.list_jobs(NS, state=InvocationState.FAILED)
    assert {j.id: j.cause for j in failed} == {ids[0]: "timed_out", ids[1]: "crashed", ids[2]: None}
    [tally] = await store.batch_tallies(NS, [ids[0]])
    assert tally.states == {"timed_out": 1, "crashed": 1, "failed": 1, "succeeded": 1}
    record = await store.get_job(NS, ids[1])
    assert record is not None and record.result_epoch == 1  # its result is still found
    assert [(a.outcome, a.signal) for a in record.job.attempts] == [("crashed", "SIGSEGV")]
