"""Claiming: exactly once across daemons, strict priority, round-robin, live membership."""

from __future__ import annotations

import asyncio
from collections import Counter

from daemon_support import NS, WAIT_S, W, fn
from polling import eventually

from lakeshore.bus import codec, subjects
from lakeshore.ids import new_id
from lakeshore.model import EventType, Invocation, now


async def test_three_daemons_claim_each_invocation_exactly_once(bench, daemons):
    q = await bench.queue("claims-once")
    for name in ("d1", "d2", "d3"):
        await daemons.start(name, queues=[q], concurrency=4)
    ids = []
    for _ in range(6):
        ids += await bench.submit(q, *[fn("noop")] * 50)
    succeeded = await bench.events.wait_count(EventType.SUCCEEDED, len(ids), queue=q)
    assert Counter(e.invocation_id for e in succeeded) == Counter(ids)
    assert len(bench.events.of(EventType.STARTED, q)) == len(ids)
    assert {e.epoch for e in succeeded} == {1}
    results = await asyncio.gather(*(bench.result(i, 1) for i in ids))
    assert all(r.ok for r in results)
    await bench.drained(q)
    # Batched: far fewer publishes than events.
    assert bench.events.batches < len(bench.events.events) / 2


async def test_a_priority_queue_is_claimed_in_strict_priority_order(bench, daemons):
    q = await bench.queue("claims-prio", kind="priority")
    priorities = [0, 5, 9, 5, 0, 9, 3]
    ids = await bench.submit(q, *[{**fn("noop"), "priority": p} for p in priorities])
    await daemons.start("solo", queues=[q])
    started = await bench.events.wait_count(EventType.STARTED, len(ids), queue=q)
    by_id = dict(zip(ids, priorities, strict=True))
    expected = sorted(ids, key=lambda i: -by_id[i])  # stable: fifo within a level
    assert [e.invocation_id for e in started] == expected
    assert [e.detail["level"] for e in bench.events.of(EventType.STARTED, q)] == sorted(
        priorities, reverse=True
    )


async def test_two_member_queues_are_served_round_robin(bench, daemons):
    a = await bench.queue("claims-rr-a")
    b = await bench.queue("claims-rr-b")
    a_ids = await bench.submit(a, *[fn("noop")] * 3)
    b_ids = await bench.submit(b, *[fn("noop")] * 3)
    await daemons.start("solo", queues=[a, b])
    started = await bench.events.wait_count(EventType.STARTED, 6)
    # Events travel per queue subject, so only their timestamps order them across queues.
    started.sort(key=lambda e: e.ts)
    assert [e.invocation_id for e in started] == [
        x for pair in zip(a_ids, b_ids, strict=True) for x in pair
    ]


async def test_a_membership_edit_is_taken_up_within_two_heartbeats(bench, daemons, api):
    a = await bench.queue("claims-member-a")
    b = await bench.queue("claims-member-b")
    daemon = await daemons.start("member", queues=[a])
    [waiting] = await bench.submit(b, fn("noop"))
    status, body = await api.post(f"{W}/{daemon.id}/queues", {"add": [b]})
    assert status == 200 and body["queues"] == [a, b]
    heart = daemon.running.heartbeater
    async with asyncio.timeout(WAIT_S):
        await heart.wait_beats(2)
    assert heart.queues == [a, b]
    assert await bench.events.wait_final(waiting) is EventType.SUCCEEDED
    status, body = await api.post(f"{W}/{daemon.id}/queues", {"remove": [a]})
    async with asyncio.timeout(WAIT_S):
        await heart.wait_beats(2)
    assert heart.queues == [b]


async def test_a_daemon_without_queues_serves_the_default_queue(bench, daemons, api):
    await api.get("/v1/namespaces/default/queues")  # materialises the default queue
    await daemons.start("plain")
    [inv_id] = await bench.submit("default", fn("add", 1, 1))
    assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED


async def test_a_nudge_that_came_before_the_work_could_be_pulled_is_checked_again(bench, daemons):
    # JetStream acknowledges a publish before its consumer counts the message, so a pull
    # right after the nudge may answer "no messages". Played here by nudging first and
    # storing the work only once the nudged claim has come back empty; the idle poll is
    # an hour away, so only the daemon's second look can find the work.
    q = await bench.queue("claims-recheck")
    daemon = await daemons.start("solo", queues=[q], idle_poll_s=3600)
    claimer = daemon.running.claimer
    empty = asyncio.Condition()  # notified at each claim that came back empty
    empties = 0
    claim = claimer.claim

    async def watched(slots: int) -> list:
        nonlocal empties
        got = await claim(slots)
        if not got:
            async with empty:
                empties += 1
                empty.notify_all()
        return got

    claimer.claim = watched  # type: ignore[method-assign]

    async def nudge_comes_back_empty(times: int) -> bool:
        """Nudge; whether ``times`` empty claims follow it (the claim, then its recheck)."""
        before = empties
        await bench.nc.publish(subjects.nudge_subject(NS, q), b"")
        try:
            async with asyncio.timeout(1), empty:
                await empty.wait_for(lambda: empties >= before + times)
        except TimeoutError:
            return False  # not heard: the daemon was reconnecting (a new queue's grant)
        return True

    # Once the daemon hears nudges (its subscription is made as it starts), a nudge to an
    # empty queue is claimed for twice: at once and once more.
    await eventually(lambda: nudge_comes_back_empty(2), timeout_s=WAIT_S, what="nudges heard")
    assert await nudge_comes_back_empty(1)  # the nudged claim found nothing; now the work:
    inv = Invocation(id=new_id(), namespace=NS, queue=q, fn="daemon_jobs:noop", submitted_at=now())
    await bench.js.publish(subjects.level_subject(NS, q, 0), codec.encode(inv))
    assert await bench.events.wait_final(inv.id) is EventType.SUCCEEDED


async def test_each_claim_is_marked_in_its_daemons_order_and_heartbeats_carry_the_latest(
    bench, daemons, api
):
    """The mark (process, ordinal) is what the control plane compares to judge whether a
    heartbeat was sent after a claim: no clock takes part (a skewed daemon's claim times are
    shifted onto the server's clock in the history, its heartbeat times are not)."""
    q = await bench.queue("claims-marks")
    daemon = await daemons.start("marker", queues=[q], concurrency=1)
    ids = await bench.submit(q, *[fn("noop")] * 3)
    await bench.events.wait_count(EventType.SUCCEEDED, 3, queue=q)
    marks = {e.invocation_id: e.detail["mark"] for e in bench.events.of(EventType.STARTED, q)}
    assert sorted(n for _, n in marks.values()) == [1, 2, 3]
    assert len({boot for boot, _ in marks.values()}) == 1
    for inv_id in ids:
        status, job = await api.get(f"/v1/namespaces/{NS}/jobs/{inv_id}")
        assert status == 200 and job["attempts"][0]["claim_mark"] == marks[inv_id]
    heart = daemon.running.heartbeater
    async with asyncio.timeout(WAIT_S):
        await heart.wait_beats(1)
    latest = daemon.running.dispatcher.snapshot().claims
    assert latest is not None and [latest.boot, latest.n] == max(marks.values(), key=lambda m: m[1])
