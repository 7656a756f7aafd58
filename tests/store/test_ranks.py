"""Pending ranks kept between changes of history (:mod:`lakeshore.store.ranks`): what is
kept answers what a fresh ranking would, until a change of the queue (against a real
DuckDB file)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from lakeshore.model import EventType
from lakeshore.store import _rows, open_store
from lakeshore.store.ranks import Ranks

Con = duckdb.DuckDBPyConnection
T0 = datetime(2025, 3, 4, tzinfo=UTC)
NS = "ns"
WAIT_S = 10.0


def _id(queue: str, i: int) -> str:
    return f"0190{i:04x}-0000-7000-8000-{queue.encode().hex():0>12}"


def _submitted(queue: str, i: int, priority: int = 0) -> tuple[Any, ...]:
    detail = {"seq": i, "priority": priority, "fn": "m:f"}
    at = T0 + timedelta(seconds=i)
    return (NS, queue, _id(queue, i), at, EventType.SUBMITTED, 0, None, None, detail)


def _claimed(queue: str, i: int) -> tuple[Any, ...]:
    at = T0 + timedelta(seconds=1000 + i)
    return (NS, queue, _id(queue, i), at, EventType.CLAIMED, 1, "w", 1, {"seq": i})


def _append(con: Con, rows: list[tuple[Any, ...]]) -> None:
    """Written behind the ranks' back (nobody tells them)."""
    con.execute(_rows.INSERT_INVOCATION_EVENTS, _rows.invocation_columns(rows))


@pytest.fixture
def con(tmp_path: Path) -> Iterator[Con]:
    """A migrated store file with a backlog of 6 in queues ``a`` and ``b``; the oldest
    first, but ``a``'s #4 has priority 5."""
    path = tmp_path / "ranks.duckdb"

    async def seed() -> None:
        async with await open_store(path) as store:
            rows = [
                _submitted(q, i, 5 if (q, i) == ("a", 4) else 0) for q in "ab" for i in range(6)
            ]
            await store.append_invocation_events(rows)

    asyncio.run(seed())
    c = duckdb.connect(str(path))
    c.execute("SET TimeZone = 'UTC'")
    yield c
    c.close()


def _all(ranks: Ranks, con: Con, queue: str, n: int = 8) -> dict[str, int]:
    return ranks.positions(con, NS, queue, [_id(queue, i) for i in range(n)])


def _a(*order: int) -> dict[str, int]:
    return {_id("a", i): pos for pos, i in enumerate(order)}


def test_the_ranks_are_priority_then_age_and_only_the_pending_asked_ones(con: Con):
    ranks = Ranks()
    assert _all(ranks, con, "a") == _a(4, 0, 1, 2, 3, 5)
    assert ranks.positions(con, NS, "a", [_id("a", 2), _id("a", 99)]) == {_id("a", 2): 3}
    assert ranks.positions(con, NS, "a", []) == {}


def test_a_ranking_asked_once_at_a_version_is_not_kept(con: Con):
    ranks = Ranks()
    assert _all(ranks, con, "a") == _a(4, 0, 1, 2, 3, 5)
    _append(con, [_claimed("a", 4)])
    assert _all(ranks, con, "a") == _a(0, 1, 2, 3, 5)


def test_kept_ranks_answer_until_the_queue_is_said_to_have_changed(con: Con):
    ranks = Ranks()
    assert _all(ranks, con, "a") == _all(ranks, con, "a") == _a(4, 0, 1, 2, 3, 5)
    _append(con, [_claimed("a", 4), _submitted("a", 6, priority=9)])
    # Unchanged as far as the ranks know: the kept answer, not the file's.
    assert _all(ranks, con, "a") == _a(4, 0, 1, 2, 3, 5)
    ranks.changed([(NS, "b")])
    assert _all(ranks, con, "a") == _a(4, 0, 1, 2, 3, 5)
    ranks.changed([(NS, "a")])
    assert _all(ranks, con, "a") == _a(6, 0, 1, 2, 3, 5)
    _append(con, [_claimed("a", 6)])
    # Asked once since the change: nothing kept, the file's answer again.
    assert _all(ranks, con, "a") == _a(0, 1, 2, 3, 5)


def test_a_change_of_every_queue_drops_every_kept_ranking(con: Con):
    ranks = Ranks()
    for queue in "aabb":
        _all(ranks, con, queue)
    _append(con, [_claimed("a", 0), _claimed("b", 0)])
    ranks.changed_all()
    assert _all(ranks, con, "a") == _a(4, 1, 2, 3, 5)
    assert _all(ranks, con, "b") == {_id("b", i): i - 1 for i in range(1, 6)}


def test_a_backlog_larger_than_the_budget_is_ranked_every_time_and_never_kept(con: Con):
    ranks = Ranks(budget=5)
    assert _all(ranks, con, "a") == _all(ranks, con, "a") == _a(4, 0, 1, 2, 3, 5)
    _append(con, [_claimed("a", 4)])
    assert _all(ranks, con, "a") == _a(0, 1, 2, 3, 5)


def test_the_least_recently_used_ranking_is_forgotten_first_over_the_budget(con: Con):
    ranks = Ranks(budget=12)
    for queue in "aabba":  # both kept (12 ids), then a used again
        _all(ranks, con, queue)
    _append(con, [_submitted("c", i) for i in range(6)])
    assert _all(ranks, con, "c") == _all(ranks, con, "c") == {_id("c", i): i for i in range(6)}
    _append(con, [_claimed("a", 0), _claimed("b", 0)])
    # Ranking c took b's room (a was used since b): a's kept answer stays, b's is the file's.
    assert _all(ranks, con, "a") == _a(4, 0, 1, 2, 3, 5)
    assert _all(ranks, con, "b") == {_id("b", i): i - 1 for i in range(1, 6)}


async def test_the_stores_appends_move_every_rank_they_change(tmp_path: Path):
    async with await open_store(tmp_path / "x.duckdb") as store:
        await store.append_invocation_events([_submitted("a", i) for i in range(4)])

        async def positions() -> list[int | None]:
            jobs = [await store.get_job(NS, _id("a", i)) for i in range(5)]
            return [None if j is None else j.job.position for j in jobs]

        async with asyncio.timeout(WAIT_S):
            assert await positions() == [0, 1, 2, 3, None]
            await store.append_invocation_events([_claimed("a", 0), _submitted("a", 4, 1)])
            assert await positions() == [None, 1, 2, 3, 0]
            listed = await store.list_jobs(NS, queue="a", state=None, limit=10, after=None)
            assert {j.id: j.position for j in listed} == {
                _id("a", 0): None, _id("a", 1): 1, _id("a", 2): 2, _id("a", 3): 3, _id("a", 4): 0,
            }  # fmt: skip
