"""The job queries of a large history answer what the small one did: positions in the
backlog, pages of jobs, a queue's activity (against a real DuckDB file)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakeshore.model import EventType, InvocationState
from lakeshore.store import Store, open_store

T0 = datetime(2025, 3, 4, tzinfo=UTC)
NS = "ns"
E = EventType


def _id(i: int) -> str:
    return f"0190{i:04x}-0000-7000-8000-000000000000"


def _events(rng: random.Random, queue: str, i: int) -> tuple[list[tuple[Any, ...]], str, int]:
    """An invocation's events; its state (pending, running or succeeded) and priority."""
    inv, priority = _id(i), rng.randint(0, 9)
    at = T0 + timedelta(seconds=rng.randint(0, 50))  # ties of submitted_at are ranked by id
    detail = {"seq": i, "priority": priority, "fn": "m:f"}
    rows = [(NS, queue, inv, at, E.SUBMITTED, 0, None, None, detail)]
    fate = rng.choice(["pending", "running", "succeeded", "retried", "stale-ended"])
    steps = {
        "pending": [],
        "running": [(E.CLAIMED, 1), (E.STARTED, 1)],
        "succeeded": [(E.CLAIMED, 1), (E.STARTED, 1), (E.SUCCEEDED, 1)],
        # back in the queue after a failed attempt: pending again
        "retried": [(E.CLAIMED, 1), (E.STARTED, 1), (E.RETRYING, 1)],
        # a stale completion is recorded but does not end it
        "stale-ended": [(E.STALE, 1)],
    }[fate]
    for n, (type_, epoch) in enumerate(steps, 1):
        rows.append((NS, queue, inv, at + timedelta(seconds=n), type_, 1, "w", epoch, {"seq": i}))
    state = {"retried": "pending", "stale-ended": "pending"}.get(fate, fate)
    return rows, state, priority


async def _seed(store: Store) -> dict[str, tuple[str, int, datetime]]:
    """Two queues of mixed invocations; id → (state, priority, submitted_at) of queue a."""
    rng = random.Random(11)
    known: dict[str, tuple[str, int, datetime]] = {}
    rows: list[tuple[Any, ...]] = []
    for i in range(160):
        queue = "a" if i % 4 else "b"
        evs, state, priority = _events(rng, queue, i)
        rows += evs
        if queue == "a":
            known[evs[0][2]] = (state, priority, evs[0][3])
    rng.shuffle(rows)
    for start in range(0, len(rows), 37):
        await store.append_invocation_events(rows[start : start + 37])
    return known


def _expected_positions(known: dict[str, tuple[str, int, datetime]]) -> dict[str, int]:
    pending = [(-p, at, inv) for inv, (s, p, at) in known.items() if s == "pending"]
    return {inv: n for n, (_, _, inv) in enumerate(sorted(pending))}


async def test_positions_rank_the_pending_of_the_queue_only(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "s.duckdb") as store:
        known = await _seed(store)
        expected = _expected_positions(known)
        assert len(expected) > 20
        for inv, (state, _, _) in known.items():
            record = await store.get_job(NS, inv)
            assert record is not None and record.job.state.value == state
            assert record.job.position == expected.get(inv), inv
        listed = await store.list_jobs(NS, queue="a", state=InvocationState.PENDING, limit=7)
        assert [j.id for j in listed] == sorted(expected, reverse=True)[:7]
        assert {j.id: j.position for j in listed} == {j.id: expected[j.id] for j in listed}
        everything = await store.list_jobs(NS, limit=1000)
        assert {j.id: j.position for j in everything if j.queue == "a"} == {
            inv: expected.get(inv) for inv in known
        }


async def test_pages_of_every_state_chain_without_gaps_or_repeats(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "s.duckdb") as store:
        known = await _seed(store)
        for state in (None, InvocationState.PENDING, InvocationState.RUNNING,
                      InvocationState.SUCCEEDED):  # fmt: skip
            seen: list[str] = []
            after = None
            while page := await store.list_jobs(NS, queue="a", state=state, limit=3, after=after):
                seen += [j.id for j in page]
                after = page[-1].id
            wanted = [i for i, (s, _, _) in known.items() if state is None or s == state.value]
            assert seen == sorted(wanted, reverse=True), state


async def test_activity_without_unfinished_skips_only_the_oldest_pending(tmp_path: Path) -> None:
    async with await open_store(tmp_path / "s.duckdb") as store:
        known = await _seed(store)
        since = T0 - timedelta(minutes=5)
        full = await store.queue_activity(NS, "a", since)
        oldest = min(at for s, _, at in known.values() if s == "pending")
        assert full.oldest_pending_at == oldest
        assert full.submitted == len(known) and full.wait_p50_s == 2.0
        lean = await store.queue_activity(NS, "a", since, unfinished=False)
        assert lean.oldest_pending_at is None
        assert (lean.submitted, lean.wait_p50_s) == (full.submitted, full.wait_p50_s)
        quiet = await store.queue_activity(NS, "a", T0 + timedelta(hours=1))
        assert (quiet.submitted, quiet.wait_p50_s, quiet.oldest_pending_at) == (0, None, oldest)


async def test_the_waits_are_those_of_the_invocations_first_started_in_the_window(
    tmp_path: Path,
) -> None:
    since = T0 + timedelta(minutes=10)

    def inv(i: int, submitted_s: float, *started_s: float) -> list[tuple[Any, ...]]:
        rows = [(NS, "a", _id(i), T0 + timedelta(seconds=submitted_s), E.SUBMITTED, 0, None,
                 None, {"seq": i})]  # fmt: skip
        for n, s in enumerate(started_s, start=1):
            rows.append((NS, "a", _id(i), T0 + timedelta(seconds=s), E.STARTED, n, "w", n, {}))
        return rows

    async with await open_store(tmp_path / "s.duckdb") as store:
        await store.append_invocation_events([
            *inv(1, 0, 60, 700),  # first started before the window, again in it: not counted
            *inv(2, 590, 610),  # submitted before, first started in the window: waited 20 s
            *inv(3, 620, 624),  # all in the window: waited 4 s
            *inv(4, 630),  # never started: no wait
        ])  # fmt: skip
        activity = await store.queue_activity(NS, "a", since)
        assert (activity.wait_p50_s, activity.wait_p95_s) == (12.0, pytest.approx(19.2))
