"""The Recorder against a real nats-server and a real DuckDB file."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from harness import NS, QUEUE, WAIT_S, Harness, event

from lakeshore.actors.recorder import CarriedResult, GetStats, RecorderStats, WaitFinished
from lakeshore.bus.events import EventFeed, ensure_events_stream
from lakeshore.model import RESULT_DETAIL, EventType, InvocationState

S, C, ST = EventType.SUBMITTED, EventType.CLAIMED, EventType.STARTED
OK, FAIL = EventType.SUCCEEDED, EventType.FAILED


async def _stats(h: Harness) -> RecorderStats:
    assert h.ref is not None
    return await h.ref.ask(GetStats())


async def test_published_batches_are_appended_together_and_then_acked(harness: Harness) -> None:
    await ensure_events_stream(harness.js)
    seqs = []
    for n in range(5):
        invs = [f"inv-{n}-{i}" for i in range(20)]
        seqs.append(await harness.publish(*(event(inv, S) for inv in invs)))
    await harness.start(max_batch=64)
    await harness.recorded(seqs[-1])
    stats = await _stats(harness)
    assert (stats.events, stats.messages, stats.appends) == (100, 5, 1)
    assert await harness.types("inv-3-7") == ["submitted"]
    info = await harness.js.consumer_info("LS_EVENTS", "recorder")
    async with asyncio.timeout(WAIT_S):
        while info.num_ack_pending or info.ack_floor.stream_seq < seqs[-1]:
            info = await harness.js.consumer_info("LS_EVENTS", "recorder")
    assert info.num_pending == 0


async def test_a_late_completion_from_a_superseded_epoch_is_stale(harness: Harness) -> None:
    await harness.start()
    await harness.publish(event("z", S), event("z", C, 1), event("z", ST, 1))
    await harness.publish(event("z", C, 2), event("z", ST, 2))
    await harness.recorded(await harness.publish(event("z", OK, 1)))
    assert (await _stats(harness)).stale == 1
    waiting = await harness.ref.ask(WaitFinished(NS, "z"))
    assert not waiting.done()
    seq = await harness.publish(event("z", OK, 2))
    assert await harness.finished("z") is InvocationState.SUCCEEDED
    assert waiting.result().state is InvocationState.SUCCEEDED
    await harness.recorded(seq)  # told once fenced; the history follows
    assert await harness.types("z") == [
        "submitted", "claimed", "started", "claimed", "started", "stale", "succeeded"
    ]  # fmt: skip
    record = await harness.store.get_job(NS, "z")
    assert record is not None
    assert (record.job.state, record.result_epoch, record.job.stale) == ("succeeded", 2, 1)
    assert [a.outcome for a in record.job.attempts] == ["stale", "succeeded"]


async def test_the_result_an_accepted_outcome_carries_is_answered_and_a_stale_ones_is_not(
    harness: Harness,
) -> None:
    # A small result travels in its outcome event (detail.result), not in LS_RESULTS.
    def carrying(epoch: int, value: str) -> dict[str, Any]:
        return {"seq": 1, RESULT_DETAIL: {"id": "c", "ok": True, "value": value, "epoch": epoch}}

    await harness.start()
    await harness.publish(event("c", S), event("c", C, 1), event("c", ST, 1))
    await harness.publish(event("c", C, 2), event("c", ST, 2))
    await harness.publish(event("c", OK, 1, detail=carrying(1, "late")))  # stale: superseded
    seq = await harness.publish(event("c", OK, 2, detail=carrying(2, "kept")))
    assert await harness.finished("c") is InvocationState.SUCCEEDED
    assert harness.ref is not None
    # Answered from memory once fenced, before the history has it ...
    kept = await harness.ref.ask(CarriedResult(NS, "c", 2))
    assert kept is not None and (kept.value, kept.epoch) == ("kept", 2)
    assert await harness.ref.ask(CarriedResult(NS, "c", 1)) is None
    # ... and from the history: the accepted outcome's, not the stale one's.
    await harness.recorded(seq)
    record = await harness.store.get_job(NS, "c")
    assert record is not None and record.result_epoch == 2
    assert record.result is not None and record.result.value == "kept"


async def test_a_failure_is_logged_a_line_and_a_success_only_at_debug(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lakeshore.actors.recorder")
    await harness.start()
    for inv, end in (("ok-1", OK), ("bad-1", FAIL)):
        await harness.publish(event(inv, S), *(event(inv, t, 1) for t in (C, ST, end)))
    assert await harness.finished("bad-1") is InvocationState.FAILED
    assert await harness.finished("ok-1") is InvocationState.SUCCEEDED
    assert f"job {NS}/bad-1 failed (attempt 1)" in caplog.text
    assert "ok-1" not in caplog.text
    caplog.set_level(logging.DEBUG, "lakeshore.actors.recorder")
    await harness.publish(event("ok-2", S), *(event("ok-2", t, 1) for t in (C, ST, OK)))
    assert await harness.finished("ok-2") is InvocationState.SUCCEEDED
    assert f"job {NS}/ok-2 succeeded (attempt 1)" in caplog.text


async def test_two_executions_of_one_epoch_by_one_daemon_are_two_attempts(
    harness: Harness,
) -> None:
    # A crash lost the ack and restarted the delivery count: the same daemon ran epoch 1
    # again; its run ids tell the executions apart.
    await harness.start()
    first, again = ({"seq": 1, "run": run} for run in ("r1", "r2"))
    await harness.publish(event("r", S), *(event("r", t, 1, detail=first) for t in (C, ST, OK)))
    await harness.recorded(
        await harness.publish(*(event("r", t, 1, detail=again) for t in (C, ST, OK)))
    )
    record = await harness.store.get_job(NS, "r")
    assert record is not None
    shown = [(a.attempt, a.epoch, a.worker, a.outcome, a.duplicate) for a in record.job.attempts]
    assert shown == [(1, 1, "w-1", "succeeded", False), (2, 1, "w-1", "stale", True)]
    assert (record.job.state, record.job.stale, record.result_epoch) == ("succeeded", 1, 1)


async def test_a_second_completion_is_stale_in_the_same_fetch_too(harness: Harness) -> None:
    await ensure_events_stream(harness.js)
    await harness.publish(event("d", S), event("d", C, 1), event("d", ST, 1), event("d", OK, 1))
    last = await harness.publish(event("d", FAIL, 1), event("d", OK, 1))
    await harness.start()
    await harness.recorded(last)
    assert await harness.types("d") == [
        "submitted", "claimed", "started", "succeeded", "stale", "stale"
    ]  # fmt: skip
    assert (await _stats(harness)).appends == 1


async def test_restart_rebuilds_the_fences_from_duckdb(harness: Harness) -> None:
    await harness.start()
    await harness.publish(event("r", S), event("r", C, 1), event("r", ST, 1))
    await harness.recorded(await harness.publish(event("r", C, 2), event("r", ST, 2)))
    await harness.publish(event("done", S), event("done", C, 1), event("done", ST, 1))
    await harness.recorded(await harness.publish(event("done", OK, 1)))
    await harness.stop()

    await harness.start()
    assert (await _stats(harness)).unfinished == 1
    assert await harness.finished("done") is InvocationState.SUCCEEDED
    await harness.recorded(await harness.publish(event("r", OK, 1), event("done", OK, 1)))
    assert await harness.types("r") == ["submitted", "claimed", "started", "claimed",
                                        "started", "stale"]  # fmt: skip
    assert (await harness.types("done"))[-1] == "stale"
    await harness.publish(event("r", OK, 2))
    assert await harness.finished("r") is InvocationState.SUCCEEDED


async def test_a_finished_invocation_out_of_memory_is_fenced_from_the_store(
    harness: Harness,
) -> None:
    await harness.start(finished_cache=0)
    await harness.publish(event("old", S), event("old", C, 1), event("old", ST, 1))
    await harness.recorded(await harness.publish(event("old", OK, 1)))
    await harness.publish(event("new", S))
    await harness.recorded(await harness.publish(event("old", OK, 1)))
    assert (await harness.types("old"))[-1] == "stale"
    assert await harness.finished("old") is InvocationState.SUCCEEDED


async def test_a_redelivered_message_is_not_recorded_twice(harness: Harness) -> None:
    class LosingAcks(EventFeed):
        """A real feed whose acks never reach the server, as after a crash right after
        the append: JetStream redelivers the message once ``ack_wait`` has passed."""

        async def ack(self, deliveries):
            return None

    await harness.start(feed=LosingAcks(harness.nc, ack_wait_s=1.0))
    seq = await harness.publish(event("once", S), event("once", C, 1))
    await harness.recorded(seq)
    await harness.stop()

    await harness.start(feed=EventFeed(harness.nc, ack_wait_s=1.0))
    await harness.recorded(seq)
    stats = await _stats(harness)
    assert (stats.messages, stats.events) == (1, 0)
    assert await harness.types("once") == ["submitted", "claimed"]


async def test_deliveries_a_killed_run_never_acked_are_recorded_at_once_on_restart(
    harness: Harness,
) -> None:
    """A control plane killed between its fetch and its append leaves the messages
    delivered and unacked on its consumer; the next run (its file's position known) reads
    them again at once, not after the consumer's ack wait (30 s)."""
    await ensure_events_stream(harness.js)
    seq = await harness.publish(event("late", S), event("late", C, 1))
    dead = await harness.js.pull_subscribe_bind("recorder", stream="LS_EVENTS")
    [taken] = await dead.fetch(1, timeout=WAIT_S)  # the killed run's fetch: never acked
    assert taken.metadata.sequence.stream == seq
    await dead.unsubscribe()
    assert (await harness.js.consumer_info("LS_EVENTS", "recorder")).num_ack_pending == 1

    await harness.start(
        feed=EventFeed(harness.nc, start_after=await harness.store.events_position())
    )
    await harness.recorded(seq)  # bounded by WAIT_S, well inside the ack wait
    assert await harness.types("late") == ["submitted", "claimed"]


async def test_undecodable_messages_and_foreign_events_are_dropped(harness: Harness) -> None:
    await harness.start()
    await harness.publish_raw(b"not json")
    await harness.publish_raw(b'{"events": [{"type": "exploded"}]}')
    spoofed = event("spoof", S, ns="other")
    seq = await harness.publish(event("good", S), spoofed)
    await harness.recorded(seq)
    assert await harness.types("good") == ["submitted"]
    assert await harness.store.list_invocation_events("other", "spoof") == []


async def test_wait_finished_answers_at_once_for_an_invocation_finished_long_ago(
    harness: Harness,
) -> None:
    t0 = datetime.now(UTC) - timedelta(days=1)
    await harness.store.append_invocation_events(
        [(NS, QUEUE, "ancient", t0, "submitted", 0, None, None, None),
         (NS, QUEUE, "ancient", t0, "dropped", 0, None, None, None)]
    )  # fmt: skip
    await harness.start(finished_cache=0)
    assert await harness.finished("ancient") is InvocationState.DROPPED
    pending = await harness.ref.ask(WaitFinished(NS, "never"))
    assert not pending.done()
    pending.cancel()
