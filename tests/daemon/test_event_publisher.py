"""The daemon's event publisher: a short run's events share one message; events nobody
waits for still go out on their own, soon; an awaited event goes at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

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
