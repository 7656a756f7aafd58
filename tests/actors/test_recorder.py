"""Recorder: lifecycle events published on the in-memory bus reach the store through the
feed, fenced (late completions recorded ``stale``), each message recorded once even when
redelivered; waiters resolve on terminal events; a restart reloads the unfinished fences."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from polling import eventually

from lakeshore.actors import recorder
from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.recorder import (
    GetStats,
    Knows,
    Recorder,
    RecorderMsg,
    RecorderStats,
    WaitFinished,
    WaitRecorded,
)
from lakeshore.bus.memory import InMemoryBus, InMemoryFeed
from lakeshore.errors import Internal, Unavailable
from lakeshore.fencing import Fence
from lakeshore.model import EventBatch, EventType, InvocationEvent, InvocationState
from lakeshore.store.memory import InMemoryStore

from .support import NS, WAIT_S, event, fail_once, settle

S, C, ST = EventType.SUBMITTED, EventType.CLAIMED, EventType.STARTED
OK, FAIL, DROP = EventType.SUCCEEDED, EventType.FAILED, EventType.DROPPED


class Recording:
    """A Recorder over ``store`` and ``bus.feed()``; ``publish`` acts as the producers do."""

    def __init__(self, runtime: Runtime, store: InMemoryStore, bus: InMemoryBus) -> None:
        self.runtime, self.store, self.bus = runtime, store, bus
        self.feed: InMemoryFeed = bus.feed()
        self.ref: ActorRef[RecorderMsg] | None = None

    async def start(self) -> ActorRef[RecorderMsg]:
        self.ref = await self.runtime.spawn(Recorder(self.store, self.feed))
        return self.ref

    async def restart(self) -> ActorRef[RecorderMsg]:
        """Another Recorder on the same store and events stream (a control-plane restart)."""
        assert self.ref is not None
        await self.runtime.stop(self.ref)
        self.feed = self.bus.feed()
        return await self.start()

    async def ask(self, msg: RecorderMsg) -> Any:
        assert self.ref is not None
        return await self.ref.ask(msg)

    async def publish(self, *events: InvocationEvent, queue: str = "q") -> int:
        """One event message; answers its events-stream sequence."""
        await self.bus.publish_events(NS, queue, EventBatch(events=list(events)))
        return len(self.bus.events)

    async def recorded(self, seq: int) -> None:
        await settle(await self.ask(WaitRecorded(seq)))

    async def finished(self, inv: str) -> Fence:
        return await settle(await self.ask(WaitFinished(NS, inv)))

    async def stats(self) -> RecorderStats:
        return await self.ask(GetStats())

    def types(self, inv: str) -> list[str]:
        return [row[4] for row in self.store.invocation_events if row[2] == inv]


@pytest.fixture
async def rec(runtime: Runtime, store: InMemoryStore, bus: InMemoryBus) -> AsyncIterator[Recording]:
    r = Recording(runtime, store, bus)
    await r.start()
    yield r


async def test_published_events_reach_the_store_and_are_then_acked(rec: Recording) -> None:
    await rec.publish(event("inv-1", S), event("inv-2", S))
    last = await rec.publish(event("inv-1", C, 1), event("inv-1", ST, 1))
    await rec.recorded(last)
    assert rec.types("inv-1") == ["submitted", "claimed", "started"]
    assert rec.types("inv-2") == ["submitted"]
    [row] = [r for r in rec.store.invocation_events if r[2] == "inv-1" and r[4] == "started"]
    assert (row[0], row[1], row[5], row[6], row[7]) == (NS, "q", 1, "w-1", 1)
    assert await rec.store.recorded_batches([1, 2]) == {1, 2}
    await eventually(rec.feed.progress, until=lambda p: p == (last, last), timeout_s=WAIT_S,
                     what="the recorded messages to be acked")  # fmt: skip
    stats = await rec.stats()
    assert (stats.events, stats.messages, stats.stale, stats.last_seq) == (4, 2, 0, last)
    assert stats.unfinished == 2


async def test_wait_recorded_answers_at_once_for_a_message_already_recorded(
    rec: Recording,
) -> None:
    seq = await rec.publish(event("inv-1", S))
    await rec.recorded(seq)
    future = await rec.ask(WaitRecorded(seq))
    assert future.done() and future.result() == seq


async def test_wait_finished_resolves_when_the_terminal_event_is_fenced(
    rec: Recording,
) -> None:
    waiting = await rec.ask(WaitFinished(NS, "inv-1"))
    await rec.recorded(await rec.publish(event("inv-1", S), event("inv-1", C, 1)))
    assert not waiting.done()
    await rec.recorded(await rec.publish(event("inv-1", ST, 1)))
    assert not waiting.done()
    await rec.publish(event("inv-1", OK, 1))
    fence = await settle(waiting)
    assert (fence.state, fence.started_epoch) == (InvocationState.SUCCEEDED, 1)
    assert await rec.ask(Knows(NS, "inv-1")) is True
    again = await rec.ask(WaitFinished(NS, "inv-1"))  # finished: answered at once
    assert again.done() and again.result().state is InvocationState.SUCCEEDED


async def test_a_pending_invocation_dropped_or_cancelled_by_the_control_plane_finishes(
    rec: Recording,
) -> None:
    await rec.publish(event("inv-1", S), event("inv-1", DROP))
    await rec.publish(event("inv-2", S), event("inv-2", EventType.CANCELLED))
    assert (await rec.finished("inv-1")).state is InvocationState.DROPPED
    assert (await rec.finished("inv-2")).state is InvocationState.CANCELLED


async def test_a_late_completion_from_a_superseded_attempt_is_recorded_stale(
    rec: Recording,
) -> None:
    await rec.publish(event("inv-1", S), event("inv-1", C, 1), event("inv-1", ST, 1))
    await rec.publish(event("inv-1", C, 2), event("inv-1", ST, 2))  # redelivered: attempt 2
    waiting = await rec.ask(WaitFinished(NS, "inv-1"))
    await rec.recorded(await rec.publish(event("inv-1", OK, 1)))  # attempt 1 ends late
    assert not waiting.done()
    assert (await rec.stats()).stale == 1
    [stale] = [r for r in rec.store.invocation_events if r[4] == "stale"]
    assert stale[7] == 1
    assert stale[8] == {"stale_type": "succeeded",
                        "stale_reason": "epoch 1 was superseded by epoch 2"}  # fmt: skip
    seq = await rec.publish(event("inv-1", FAIL, 2))
    assert (await settle(waiting)).state is InvocationState.FAILED
    await rec.recorded(seq)
    assert rec.types("inv-1") == [
        "submitted", "claimed", "started", "claimed", "started", "stale", "failed"
    ]  # fmt: skip


async def test_a_second_completion_is_stale_even_in_the_same_message(rec: Recording) -> None:
    seq = await rec.publish(
        event("inv-1", S), event("inv-1", C, 1), event("inv-1", ST, 1),
        event("inv-1", OK, 1), event("inv-1", FAIL, 1),
    )  # fmt: skip
    await rec.recorded(seq)
    assert rec.types("inv-1")[-2:] == ["succeeded", "stale"]
    assert (await rec.finished("inv-1")).state is InvocationState.SUCCEEDED


async def test_an_event_naming_another_queue_than_its_subject_is_dropped(rec: Recording) -> None:
    seq = await rec.publish(event("inv-1", S, queue="q"), event("inv-2", S, queue="other"))
    await rec.recorded(seq)
    assert rec.types("inv-1") == ["submitted"]
    assert rec.types("inv-2") == []


async def test_a_redelivered_message_already_recorded_is_not_recorded_twice(
    rec: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    # The append succeeds, the ack is lost: JetStream would redeliver the message.
    fail_once(rec.feed, "ack", RuntimeError("the ack did not reach the server"))
    await rec.recorded(await rec.publish(event("inv-1", S), event("inv-1", C, 1)))
    with caplog.at_level(logging.INFO, logger=recorder.__name__):
        await rec.bus.redeliver()
        # A later message is recorded after the redelivered one (fetches are oldest first),
        # so once it is, the redelivery has been judged.
        await rec.recorded(await rec.publish(event("inv-2", S)))
    assert "1 redelivered message(s) were already recorded" in caplog.text
    assert rec.types("inv-1") == ["submitted", "claimed"]
    last = len(rec.bus.events)
    await eventually(rec.feed.progress, until=lambda p: p == (last, last), timeout_s=WAIT_S,
                     what="the redelivered message to be acked")  # fmt: skip


async def test_a_failed_append_is_retried_and_recorded_once(rec: Recording) -> None:
    fail_once(rec.store, "append_invocation_events", RuntimeError("disk full"))
    await rec.publish(event("inv-1", S))
    await rec.publish(event("inv-1", C, 1), event("inv-1", ST, 1), event("inv-1", OK, 1))
    assert (await rec.finished("inv-1")).state is InvocationState.SUCCEEDED
    await rec.recorded(len(rec.bus.events))
    assert rec.types("inv-1") == ["submitted", "claimed", "started", "succeeded"]


async def test_a_restart_reloads_the_unfinished_fences_from_the_store(rec: Recording) -> None:
    await rec.publish(event("inv-1", S), event("inv-1", C, 1), event("inv-1", ST, 1))
    await rec.publish(event("inv-1", C, 2), event("inv-1", ST, 2))
    await rec.publish(event("inv-2", S), event("inv-2", C, 1), event("inv-2", ST, 1))
    await rec.recorded(await rec.publish(event("inv-2", OK, 1)))
    await rec.restart()
    assert await rec.ask(Knows(NS, "inv-1")) is True  # unfinished: loaded
    assert await rec.ask(Knows(NS, "inv-2")) is False  # finished: asked of the store
    assert (await rec.stats()).unfinished == 1
    # the reloaded fence knows attempt 2 started: attempt 1's completion is stale
    await rec.recorded(await rec.publish(event("inv-1", OK, 1)))
    assert rec.types("inv-1")[-1] == "stale"
    # a finished invocation out of memory is fenced from the store
    await rec.recorded(await rec.publish(event("inv-2", FAIL, 1)))
    assert rec.types("inv-2")[-1] == "stale"
    assert (await rec.finished("inv-2")).state is InvocationState.SUCCEEDED
    await rec.publish(event("inv-1", OK, 2))
    assert (await rec.finished("inv-1")).state is InvocationState.SUCCEEDED
    assert (await rec.stats()).stale == 2


async def test_after_a_restart_a_wait_for_what_was_acknowledged_is_over_at_once(
    rec: Recording,
) -> None:
    # a read that catches up after a restart waited out its bound when nothing new came
    last = await rec.publish(event("inv-1", S), event("inv-1", DROP))
    await rec.recorded(last)
    await eventually(rec.feed.progress, until=lambda p: p == (last, last), timeout_s=WAIT_S,
                     what="the recorded message to be acked")  # fmt: skip
    await rec.restart()
    future = await rec.ask(WaitRecorded(last))
    assert future.done() and future.result() == last
    later = await rec.publish(event("inv-2", S))
    waiting = await rec.ask(WaitRecorded(later))  # one not recorded yet is still waited for
    assert await settle(waiting) == later


async def test_messages_published_while_stopped_are_recorded_after_the_restart(
    runtime: Runtime, rec: Recording
) -> None:
    assert rec.ref is not None
    await runtime.stop(rec.ref)
    seq = await rec.publish(event("inv-1", S), event("inv-1", DROP))
    rec.feed = rec.bus.feed()
    await rec.start()
    await rec.recorded(seq)
    assert rec.types("inv-1") == ["submitted", "dropped"]


async def test_a_crash_restarts_the_recorder_with_its_fences_reloaded(rec: Recording) -> None:
    await rec.publish(event("inv-1", S), event("inv-1", C, 1), event("inv-1", ST, 1))
    await rec.recorded(await rec.publish(event("inv-2", S), event("inv-2", DROP)))
    await rec.restart()  # inv-2 is now known only to the store
    fail_once(rec.store, "fences", RuntimeError("a bug"))
    with pytest.raises(Internal, match="recorder failed"):
        await rec.ask(WaitFinished(NS, "inv-2"))
    assert rec.ref is not None and rec.ref.restarts == 1
    assert await rec.ask(Knows(NS, "inv-1")) is True
    assert (await rec.finished("inv-2")).state is InvocationState.DROPPED
    await rec.publish(event("inv-1", OK, 1))  # and the loop records again
    assert (await rec.finished("inv-1")).state is InvocationState.SUCCEEDED


async def test_stopping_the_recorder_fails_its_waiters(runtime: Runtime, rec: Recording) -> None:
    waiting = await rec.ask(WaitFinished(NS, "inv-1"))
    assert rec.ref is not None
    await runtime.stop(rec.ref)
    with pytest.raises(Unavailable, match="the recorder stopped"):
        await settle(waiting)
