"""Tenants' reads (:mod:`lakeshore.store.reads`): one org's flood takes one lane, the orgs
are served in turn, and a read sees what was committed (against a real DuckDB file)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import duckdb
import pytest

from lakeshore import errors
from lakeshore.store.reads import FairReads

Con = duckdb.DuckDBPyConnection
WAIT_S = 10.0


@pytest.fixture
def con(tmp_path: Path) -> Con:
    c = duckdb.connect(str(tmp_path / "reads.duckdb"))
    c.execute("CREATE TABLE t (v INTEGER)")
    c.execute("INSERT INTO t VALUES (1)")
    yield c
    c.close()


async def _reads(con: Con, lanes: int) -> FairReads:
    return FairReads.open([con.cursor() for _ in range(lanes)])


@pytest.fixture
async def two_lanes(con: Con) -> AsyncIterator[FairReads]:
    reads = await _reads(con, 2)
    yield reads
    await reads.close()


class Gate:
    """A read that holds its lane until :meth:`open`, and says when it started."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self._open = threading.Event()

    def read(self, cursor: Con) -> str:
        self.started.set()
        if not self._open.wait(WAIT_S):
            raise AssertionError("the gate was never opened")
        return "gated"

    async def until_started(self) -> None:
        assert await asyncio.to_thread(self.started.wait, WAIT_S), "the gated read never ran"

    def open(self) -> None:
        self._open.set()


def _noted(log: list[str], name: str) -> Callable[[Con], str]:
    def read(cursor: Con) -> str:
        log.append(name)
        return name

    return read


async def test_a_flood_of_one_org_holds_one_lane_and_another_org_is_served_beside_it(
    two_lanes: FairReads,
):
    gate, started = Gate(), []
    flood = [asyncio.create_task(two_lanes.run("b", gate.read))]
    await gate.until_started()
    flood += [asyncio.create_task(two_lanes.run("b", _noted(started, f"b{i}"))) for i in range(50)]
    async with asyncio.timeout(WAIT_S):
        got = await two_lanes.run("a", lambda c: c.execute("SELECT sum(v) FROM t").fetchone()[0])
    assert got == 1
    # Answered while b's first read still held its lane, and none of b's others ran.
    assert started == [] and two_lanes.queued("b") == 50
    gate.open()
    async with asyncio.timeout(WAIT_S):
        answers = await asyncio.gather(*flood)
    assert answers == ["gated", *(f"b{i}" for i in range(50))]
    assert started == [f"b{i}" for i in range(50)]


async def test_orgs_with_reads_waiting_are_served_in_turn(con: Con):
    reads = await _reads(con, 1)
    try:
        gate, ran = Gate(), []
        first = asyncio.create_task(reads.run("b", gate.read))
        await gate.until_started()
        names = ["b1", "b2", "b3", "a1", "a2", "c1"]
        rest = [asyncio.create_task(reads.run(n[0], _noted(ran, n))) for n in names]
        await asyncio.sleep(0)  # every read queued before the lane frees
        gate.open()
        async with asyncio.timeout(WAIT_S):
            await asyncio.gather(first, *rest)
        # a and c asked while b's first read ran: each gets a turn before b's next.
        assert ran == ["a1", "c1", "b1", "a2", "b2", "b3"]
    finally:
        await reads.close()


async def test_a_read_sees_committed_rows_only(con: Con, two_lanes: FairReads):
    def total(cursor: Con) -> int:
        return cursor.execute("SELECT sum(v) FROM t").fetchone()[0]

    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (10)")
    async with asyncio.timeout(WAIT_S):
        assert await two_lanes.run("a", total) == 1
        con.execute("COMMIT")
        assert await two_lanes.run("a", total) == 11


async def test_a_read_whose_asker_left_while_it_waited_is_not_run(con: Con):
    reads = await _reads(con, 1)
    try:
        gate, ran = Gate(), []
        first = asyncio.create_task(reads.run("a", gate.read))
        await gate.until_started()
        left = asyncio.create_task(reads.run("b", _noted(ran, "left")))
        await asyncio.sleep(0)
        left.cancel()
        stays = asyncio.create_task(reads.run("b", _noted(ran, "stays")))
        gate.open()
        async with asyncio.timeout(WAIT_S):
            assert await first == "gated" and await stays == "stays"
        assert ran == ["stays"] and left.cancelled()
    finally:
        await reads.close()


async def test_a_failing_read_fails_its_asker_only(two_lanes: FairReads):
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(duckdb.CatalogException):
            await two_lanes.run("a", lambda c: c.execute("SELECT * FROM missing").fetchall())
        assert await two_lanes.run("a", lambda c: c.execute("SELECT 2").fetchone()[0]) == 2


async def test_close_refuses_waiting_reads_and_lets_the_running_one_end(con: Con):
    reads = await _reads(con, 1)
    gate = Gate()
    running = asyncio.create_task(reads.run("a", gate.read))
    await gate.until_started()
    waiting = asyncio.create_task(reads.run("b", lambda c: "never"))
    await asyncio.sleep(0)
    closing = asyncio.create_task(reads.close())
    async with asyncio.timeout(WAIT_S):
        with pytest.raises(errors.Unavailable):
            await waiting
        gate.open()
        assert await running == "gated"
        await closing
    with pytest.raises(errors.Unavailable):
        await reads.run("a", lambda c: "closed")
