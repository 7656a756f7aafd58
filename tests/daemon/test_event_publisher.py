"""The daemon's event publisher: a short run's events share one message; events nobody
waits for still go out on their own, soon; an awaited event goes at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from polling import eventually

from lakeshore.daemon import events as events_module
from lakeshore.daemon.events import EventPublisher
from lakeshore.model import EventBatch, EventType, InvocationEvent, now


class Batches:
    """Where the publisher's batches land (the port :class:`EventPublisher` publishes to)."""

    def __init__(self) -> None:
        self.sent: list[list[str]] = []
        self.arrived = asyncio.Event()

    async def publish_events(
        self, namespace: str, queue: str, batch: EventBatch, *, msg_id: str
    ) -> None:
        self.sent.append([e.type.value for e in batch.events])
        self.arrived.set()


def _event(type_: EventType) -> InvocationEvent:
    return InvocationEvent(
        namespace="ns", queue="q", invocation_id="i-1", ts=now(), type=type_, attempt=1, epoch=1
    )


@pytest.fixture
async def publisher() -> AsyncIterator[tuple[EventPublisher, Batches]]:
    batches = Batches()
    pub = EventPublisher(batches, "ns")
    task = asyncio.create_task(pub.run())
    yield pub, batches
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_short_runs_claim_start_and_end_travel_in_one_message(publisher) -> None:
    pub, batches = publisher
    pub.emit(_event(EventType.CLAIMED))
    pub.emit(_event(EventType.STARTED))
    await pub.publish(_event(EventType.SUCCEEDED))
    assert batches.sent == [["claimed", "started", "succeeded"]]


async def test_events_nobody_waits_for_are_published_on_their_own(publisher) -> None:
    pub, batches = publisher
    pub.emit(_event(EventType.CLAIMED))
    await asyncio.wait_for(batches.arrived.wait(), 5)
    assert batches.sent == [["claimed"]]


async def test_an_awaited_event_does_not_wait_for_the_linger(
    publisher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "LINGER_S", 60.0)
    pub, batches = publisher
    pub.emit(_event(EventType.CLAIMED))
    await asyncio.sleep(0)  # the flusher is now lingering
    await asyncio.wait_for(pub.publish(_event(EventType.FAILED)), 5)
    assert batches.sent == [["claimed", "failed"]]


class Stalled(Batches):
    """A bus that takes nothing until ``resume`` is set (NATS away)."""

    def __init__(self) -> None:
        super().__init__()
        self.resume = asyncio.Event()

    async def publish_events(
        self, namespace: str, queue: str, batch: EventBatch, *, msg_id: str
    ) -> None:
        await self.resume.wait()
        await super().publish_events(namespace, queue, batch, msg_id=msg_id)


async def test_a_bounded_publish_gives_up_waiting_and_its_event_still_goes_out() -> None:
    bus = Stalled()
    pub = EventPublisher(bus, "ns")
    task = asyncio.create_task(pub.run())
    loop = asyncio.get_running_loop()
    try:
        began = loop.time()
        slow = asyncio.create_task(pub.publish(_event(EventType.CLAIMED), within_s=5))
        await eventually(lambda: pub.buffered == 1, timeout_s=5, what="the first event buffered")
        # A shorter bound given after a longer one is kept all the same.
        with pytest.raises(TimeoutError):
            await pub.publish(_event(EventType.STARTED), within_s=0.2)
        assert 0.2 <= loop.time() - began < 4
        assert not slow.done()
        assert pub.buffered == 2
        bus.resume.set()
        await asyncio.wait_for(slow, 5)  # stored before its bound: no error
        await eventually(lambda: pub.buffered == 0, timeout_s=5, what="both events out")
        assert [t for batch in bus.sent for t in batch] == ["claimed", "started"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
