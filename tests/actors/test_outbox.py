"""The outbox: a submit's events published behind its answer, batched, retried until stored."""

from __future__ import annotations

import asyncio
import logging

import pytest

from lakeshore.actors.outbox import Outbox
from lakeshore.bus.memory import InMemoryBus
from lakeshore.errors import InsufficientStorage, Unavailable
from lakeshore.model import EventBatch, EventType, InvocationEvent

from .support import NS, event, fail_once, settle

FAST = (0.001, 0.005)


class GatedBus(InMemoryBus):
    """An in-memory bus whose event publishes wait until ``gate`` is set (a slow NATS)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = 0

    async def publish_events(self, namespace: str, queue: str, batch: EventBatch) -> int:
        self.started += 1
        await self.gate.wait()
        return await super().publish_events(namespace, queue, batch)


def submitted(inv_id: str, queue: str = "q") -> InvocationEvent:
    return event(inv_id, EventType.SUBMITTED, queue=queue)


async def until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)


async def test_what_is_put_while_a_publish_is_out_goes_in_the_next_one_per_queue_in_order() -> None:
    bus = GatedBus()
    box = Outbox(bus, retry_s=FAST)
    bus.gate.clear()
    box.put(NS, "q", [submitted("a")])
    await until(lambda: bus.started == 1)  # a's publish is out
    box.put(NS, "q", [submitted("b")])
    box.put(NS, "other", [submitted("x", queue="other")])
    box.put(NS, "q", [submitted("c"), submitted("d")])
    assert box.holds(NS, "c") and box.backlog == 5
    bus.gate.set()
    seq = await settle(box.flushed())
    batches = [(q, [e.invocation_id for e in b.events]) for _, q, b in bus.events]
    assert batches == [("q", ["a"]), ("q", ["b", "c", "d"]), ("other", ["x"])]
    assert seq == 3  # the newest message's sequence in the events stream
    assert not box.holds(NS, "c") and box.backlog == 0
    await box.close()


async def test_a_flush_with_nothing_put_is_over_at_once() -> None:
    box = Outbox(InMemoryBus())
    flushed = box.flushed()
    assert flushed.done() and flushed.result() == 0
    await box.close()


@pytest.mark.parametrize(
    "failure", [InsufficientStorage("record events", "full"), Unavailable("no answer")]
)
async def test_a_refused_publish_is_tried_again_until_it_is_stored(
    failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    bus = InMemoryBus()
    box = Outbox(bus, retry_s=FAST)
    fail_once(bus, "publish_events", failure)
    with caplog.at_level(logging.INFO, logger="lakeshore.actors.outbox"):
        box.put(NS, "q", [submitted("a")])
        await settle(box.flushed())
    assert [e.invocation_id for _, _, b in bus.events for e in b.events] == ["a"]
    assert "1 event(s) of default/q not recorded yet" in caplog.text
    assert "recorded after 1 failed tries" in caplog.text
    await box.close()


async def test_a_flush_waits_for_what_was_put_before_it_only() -> None:
    bus = GatedBus()
    box = Outbox(bus, retry_s=FAST)
    bus.gate.clear()
    box.put(NS, "q", [submitted("a")])
    first = box.flushed()
    await until(lambda: bus.started == 1)
    box.put(NS, "q", [submitted("b")])
    second = box.flushed()
    bus.gate.set()
    assert await settle(first) == 1  # resolved by a's publish, before b's
    assert await settle(second) == 2
    await box.close()


async def test_a_close_publishes_what_is_left_and_takes_nothing_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = GatedBus()
    box = Outbox(bus, retry_s=FAST)
    bus.gate.clear()
    box.put(NS, "q", [submitted("a")])
    closing = asyncio.ensure_future(box.close())
    await until(lambda: bus.started == 1)
    bus.gate.set()
    await settle(closing)
    with caplog.at_level(logging.WARNING, logger="lakeshore.actors.outbox"):
        box.put(NS, "q", [submitted("late")])
    assert [e.invocation_id for _, _, b in bus.events for e in b.events] == ["a"]
    assert "put after the outbox closed: the next term records them" in caplog.text


async def test_a_close_on_a_bus_that_takes_nothing_gives_up_after_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = GatedBus()
    box = Outbox(bus, retry_s=FAST)
    bus.gate.clear()
    box.put(NS, "q", [submitted("a"), submitted("b")])
    with caplog.at_level(logging.WARNING, logger="lakeshore.actors.outbox"):
        await settle(box.close(timeout_s=0.05))
    assert bus.events == []
    assert "2 event(s) not published before the stop" in caplog.text
