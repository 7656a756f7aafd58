"""The outbox: a submit's events published behind its answer, batched, retried until stored."""

from __future__ import annotations

import asyncio
import logging

import pytest

from lakeshore import submission
from lakeshore.actors.base import Runtime
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.recorder import Recorder, Unrecorded, WaitRecorded
from lakeshore.bus import codec
from lakeshore.bus.memory import InMemoryBus
from lakeshore.errors import InsufficientStorage, Unavailable
from lakeshore.ids import new_id
from lakeshore.model import EventBatch, EventType, Invocation, InvocationEvent, now
from lakeshore.store.memory import InMemoryStore

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


# ---- a claim that came first -------------------------------------------------------------


def stored(**fields: object) -> tuple[InvocationEvent, InvocationEvent]:
    """An invocation stored at sequence 7: its ``submitted`` event (the intake's) and the
    ``claimed`` event of a daemon that took it (carrying the record, as daemons do)."""
    inv = Invocation(id=new_id(), namespace=NS, queue="q", submitted_at=now(), **fields)
    size = len(codec.encode(inv))
    claim = event(inv.id, EventType.CLAIMED, 1)
    claim = InvocationEvent(
        **{f: getattr(claim, f) for f in claim.__struct_fields__ if f != "detail"},
        detail={submission.CARRIED: submission.carried(inv, 7, size)},
    )
    return submission.submitted(inv, 7, size, now()), claim


async def test_a_submitted_event_whose_claim_was_recorded_first_is_not_published(
    runtime: Runtime, store: InMemoryStore
) -> None:
    bus = InMemoryBus()
    recorder = await runtime.spawn(Recorder(store, bus.feed()))
    box = Outbox(
        bus,
        linger_s=30.0,
        unrecorded=lambda ns, ids: recorder.ask(Unrecorded(ns, ids, memory_only=True)),
    )
    small, small_claim = stored(fn="m:f", args=[1])
    big, big_claim = stored(command=["echo", "y" * submission.MAX_CARRIED_BYTES])
    waiting, _ = stored(fn="m:f", args=[2])  # not claimed yet
    box.put(NS, "q", [small, big, waiting])
    # The daemons' claims are recorded while the outbox lingers.
    seq = await bus.publish_events(NS, "q", EventBatch(events=[small_claim, big_claim]))
    await settle(await recorder.ask(WaitRecorded(seq)))
    last = await settle(box.flushed())  # a read that waits does not wait for the linger
    published = [(e.invocation_id, e.type) for _, _, b in bus.events[1:] for e in b.events]
    assert published == [(big.invocation_id, "submitted"), (waiting.invocation_id, "submitted")]
    assert box.skipped == 1 and box.backlog == 0 and not box.holds(NS, small.invocation_id)
    await settle(await recorder.ask(WaitRecorded(last)))
    # Each invocation is recorded submitted once; the first's record made from its claim.
    rows = [(r[2], r[4], r[8]) for r in store.invocation_events if r[4] == "submitted"]
    by_id = {inv: detail for inv, _, detail in rows}
    assert len(rows) == 3 and set(by_id) == {small.invocation_id, big.invocation_id,
                                             waiting.invocation_id}  # fmt: skip
    assert by_id[small.invocation_id] == {**small.detail, "recorded_from": "claim"}
    await box.close()


async def test_what_is_put_is_published_after_the_linger_without_anyone_waiting() -> None:
    bus = InMemoryBus()
    box = Outbox(bus, linger_s=0.01)
    box.put(NS, "q", [submitted("a")])
    assert bus.events == []  # lingering
    await until(lambda: len(bus.events) == 1)
    assert box.backlog == 0
    await box.close()


async def test_every_event_is_published_when_the_recorder_cannot_say(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def unavailable(ns: str, ids: list[str]) -> list[str]:
        raise Unavailable("the Recorder did not answer in time")

    bus = InMemoryBus()
    box = Outbox(bus, unrecorded=unavailable)
    small, _ = stored(fn="m:f", args=[1])
    box.put(NS, "q", [small])
    await settle(box.flushed())
    assert [e.invocation_id for _, _, b in bus.events for e in b.events] == [small.invocation_id]
    assert box.skipped == 0
    await box.close()
