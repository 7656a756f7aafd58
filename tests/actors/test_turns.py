"""A big submit is prepared in turns: other requests on the loop are served between them
(fault row 23: one org's 5,000-invocation batch must not hold every other org's request)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from lakeshore import collector, preparation
from lakeshore.actors.turns import TURN
from lakeshore.errors import Invalid
from lakeshore.model import InvocationSubmit, Queue, now

ROW = Queue(namespace="ns", name="q", created_at=now(), updated_at=now())


async def _turns_taken_during(work) -> tuple[object, int]:
    """Run ``work``; how many times another task ran on the loop meanwhile."""
    ran, done = 0, asyncio.Event()

    async def other_request() -> None:
        nonlocal ran
        while not done.is_set():
            await asyncio.sleep(0)
            ran += 1

    other = asyncio.ensure_future(other_request())
    await asyncio.sleep(0)  # it is waiting for its turn
    ran = 0
    try:
        result = await work
        taken = ran
    finally:
        done.set()
        await other
    return result, taken


async def test_a_big_batch_is_prepared_in_turns_that_let_other_requests_run() -> None:
    n = 10 * TURN
    specs = [InvocationSubmit(command=["true"], args=[i]) for i in range(n)]
    ids, ran = await _turns_taken_during(preparation.new_ids(n))
    assert len(set(ids)) == n and ran >= n // TURN - 1
    items, ran = await _turns_taken_during(preparation.prepare(ROW, specs, ids))
    assert [p.id for p in items] == ids
    assert ran >= n // TURN - 1


async def test_a_small_batch_takes_no_turn() -> None:
    specs = [InvocationSubmit(command=["true"])] * (TURN // 2)
    ids = await preparation.new_ids(len(specs))
    _, ran = await _turns_taken_during(preparation.prepare(ROW, specs, ids))
    assert ran == 0


async def test_a_bad_invocation_late_in_a_batch_refuses_it_whole_by_its_index() -> None:
    specs = [InvocationSubmit(command=["true"])] * (3 * TURN) + [InvocationSubmit()]
    with pytest.raises(Invalid, match=f"invocation {3 * TURN} needs exactly one of fn"):
        await preparation.prepare(ROW, specs, await preparation.new_ids(len(specs)))


def test_the_server_collects_rarely_and_never_over_what_it_started_with() -> None:
    before = gc.get_threshold()
    try:
        collector.for_a_server()
        assert gc.get_threshold() == (collector.YOUNG, collector.MIDDLE, collector.OLD)
        kept = object.__new__(type("Kept", (), {}))  # built by the start
        collector.settled()
        assert gc.get_freeze_count() > 0
        assert any(o is kept for o in gc.get_objects()) is False  # frozen: not scanned
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
