"""The bus port's contract: every test runs against NatsBus on a real nats-server and against
InMemoryBus (the ``bus`` fixture), so actor tests on the twin test what production does.

Acks, redelivery and max-deliver are only tested against JetStream (tests/recorder,
tests/daemon); the twin's own hooks are tested at the end of this file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import nats.errors
import pytest
from nats.js import errors as jse
from polling import eventually

from lakeshore.bus import codec, subjects
from lakeshore.bus.memory import InMemoryBus
from lakeshore.bus.nats import NatsBus
from lakeshore.bus.port import Delivery, Feed, Published, QueueCounts
from lakeshore.errors import Unavailable
from lakeshore.model import DaemonControl, EventBatch, EventType, InvocationEvent, Result

Q = "jobs"
#: Every wait of these tests is bounded by this (seconds), as in conftest.py.
WAIT_S = 10.0
_T = TypeVar("_T")


def item(name: str, level: int = 0) -> tuple[bytes, int, str]:
    """A work item whose payload and msg_id are both ``name``."""
    return name.encode(), level, name


def new(seq: int) -> Published:
    return Published(seq=seq, duplicate=False)


def event(ns: str, inv: str, queue: str = Q) -> InvocationEvent:
    return InvocationEvent(
        namespace=ns, queue=queue, invocation_id=inv, ts=datetime.now(UTC),
        type=EventType.SUBMITTED,
    )  # fmt: skip


async def fetch_n(feed: Feed, n: int) -> list[Delivery]:
    """Exactly ``n`` deliveries, over as many fetches as it takes."""
    out: list[Delivery] = []
    async with asyncio.timeout(WAIT_S):
        while len(out) < n:
            out += await feed.fetch(n - len(out), timeout_s=WAIT_S)
    assert len(out) == n
    return out


# -- queues --------------------------------------------------------------------------------


async def test_ensure_queue_is_idempotent(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    assert await bus.publish_work(ns, Q, [item("a")]) == [new(1)]
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    assert await bus.queue_counts(ns, Q, levels=2) == QueueCounts(pending=1, running=0, depth=1)
    assert await bus.publish_work(ns, Q, [item("b", 1)]) == [new(2)]


@pytest.mark.parametrize("bus", ["nats"], indirect=True)  # a JetStream stream's update
async def test_ensuring_an_unchanged_stream_leaves_it_alone(bus, ns, monkeypatch) -> None:
    await bus.ensure_queue(ns, Q, levels=2, max_depth=5)
    js = bus._js_short  # type: ignore[attr-defined]  # the context ensures use
    updated: list[int] = []
    update = js.update_stream

    async def spy(config: Any) -> Any:
        updated.append(config.max_msgs)
        return await update(config)

    monkeypatch.setattr(js, "update_stream", spy)
    await bus.ensure_queue(ns, Q, levels=2, max_depth=5)
    assert updated == []
    await bus.ensure_queue(ns, Q, levels=2, max_depth=6)
    assert updated == [6]
    assert (await js.stream_info(subjects.queue_stream(ns, Q))).config.max_msgs == 6


@pytest.mark.parametrize("bus", ["nats"], indirect=True)  # a consumer's own raft group
async def test_consumers_that_do_not_answer_are_ensured_later_for_a_stream_that_exists(
    bus, ns, monkeypatch
) -> None:
    # After a NATS node comes back a consumer may still elect its leader while its stream
    # answers: a new leader's start ensures the stream and does not wait for the consumers.
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    js = bus._js_short  # type: ignore[attr-defined]
    stream, durable = subjects.queue_stream(ns, Q), subjects.level_consumer(0)
    await js.delete_consumer(stream, durable)
    add, answering, asked = js.add_consumer, asyncio.Event(), []

    async def electing(*args: Any, **kwargs: Any) -> Any:
        asked.append(args[0])
        if not answering.is_set():
            raise nats.errors.TimeoutError
        return await add(*args, **kwargs)

    monkeypatch.setattr(js, "add_consumer", electing)
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    assert asked == [stream]  # asked once; the ensure returned with the consumer missing
    with pytest.raises(jse.NotFoundError):
        await js.consumer_info(stream, durable)
    answering.set()
    info = await eventually(
        lambda: js.consumer_info(stream, durable), retry_on=(jse.NotFoundError,),
        timeout_s=WAIT_S, what="the consumer ensured in the background",
    )  # fmt: skip
    assert info.config.durable_name == durable


async def test_sequences_start_at_one_and_increase_over_every_level(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=3, max_depth=None)
    assert await bus.publish_work(ns, Q, [item("a", 2), item("b", 0), item("c", 1)]) == [
        new(1),
        new(2),
        new(3),
    ]
    assert await bus.publish_work(ns, Q, []) == []


async def test_a_publish_to_a_queue_never_ensured_is_unavailable(bus, ns) -> None:
    with pytest.raises(Unavailable):
        await bus.publish_work(ns, Q, [item("a")])


async def test_a_full_queue_refuses_with_none(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=2)
    assert await bus.publish_work(ns, Q, [item("a"), item("b"), item("c")]) == [
        new(1),
        new(2),
        None,
    ]
    assert await bus.queue_counts(ns, Q, levels=1) == QueueCounts(pending=2, running=0, depth=2)


async def test_raising_max_depth_makes_room(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=1)
    assert await bus.publish_work(ns, Q, [item("a"), item("b")]) == [new(1), None]
    await bus.ensure_queue(ns, Q, levels=1, max_depth=2)
    # The refused publish stored nothing, its msg_id included: a retry is new.
    assert await bus.publish_work(ns, Q, [item("b"), item("c")]) == [new(2), None]
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    assert await bus.publish_work(ns, Q, [item("c")]) == [new(3)]


async def test_lowering_max_depth_keeps_what_is_stored_and_refuses_more(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b"), item("c")])
    await bus.ensure_queue(ns, Q, levels=1, max_depth=1)
    assert await bus.queue_counts(ns, Q, levels=1) == QueueCounts(pending=3, running=0, depth=3)
    assert await bus.publish_work(ns, Q, [item("d")]) == [None]


async def test_a_repeated_msg_id_is_a_duplicate_with_the_first_seq(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    dup1 = Published(seq=1, duplicate=True)
    assert await bus.publish_work(ns, Q, [item("a"), item("b"), item("a")]) == [
        new(1),
        new(2),
        dup1,
    ]
    # The msg_id decides, not the payload.
    assert await bus.publish_work(ns, Q, [(b"other", 0, "a")]) == [dup1]
    assert (await bus.queue_counts(ns, Q, levels=1)).depth == 2


async def test_a_duplicate_is_answered_when_the_queue_is_full_or_the_first_is_gone(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=1)
    dup1 = Published(seq=1, duplicate=True)
    assert await bus.publish_work(ns, Q, [item("a")]) == [new(1)]
    assert await bus.publish_work(ns, Q, [item("a")]) == [dup1]
    assert await bus.delete_message(ns, Q, 1)
    assert await bus.publish_work(ns, Q, [item("a")]) == [dup1]
    assert (await bus.queue_counts(ns, Q, levels=1)).depth == 0


async def test_a_stream_not_admitting_takes_nothing_and_delivers_what_it_holds(
    bus, ns, claim
) -> None:
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b"), item("c", 1)])
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None, admitting=False)  # draining
    for refused in (item("late"), item("late", 1), item("a")):  # a repeated msg_id too
        with pytest.raises(Unavailable):
            await bus.publish_work(ns, Q, [refused])
    assert await bus.queue_counts(ns, Q, levels=2) == QueueCounts(pending=3, running=0, depth=3)
    assert await bus.pending_messages(ns, Q, levels=2, limit=10) == [
        (1, b"a"), (2, b"b"), (3, b"c")
    ]  # fmt: skip
    claimed = await claim(bus, ns, Q, 0, 2)
    assert [c.payload for c in claimed] == [b"a", b"b"]
    assert [c.payload for c in await claim(bus, ns, Q, 1, 1)] == [b"c"]
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)  # unarchived: admits again
    assert await bus.publish_work(ns, Q, [item("d")]) == [new(4)]
    assert [c.payload for c in await claim(bus, ns, Q, 0, 1)] == [b"d"]


@pytest.mark.parametrize("bus", ["nats"], indirect=True)  # nobody's publish lands
async def test_a_stream_not_admitting_refuses_a_raw_publish_to_its_subjects(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None, admitting=False)
    js = bus.nc.jetstream(timeout=2)
    with pytest.raises(jse.NoStreamResponseError):
        await js.publish(subjects.level_subject(ns, Q, 0), b"raw")
    stream = await js.stream_info(subjects.queue_stream(ns, Q))
    assert stream.config.subjects == [subjects.closed_subjects(ns, Q)]
    assert stream.state.messages == 0


async def test_stored_messages_are_those_still_held_delivered_or_not(bus, ns, claim) -> None:
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b", 1), item("c"), item("d", 1)])
    [first] = await claim(bus, ns, Q, 0, 1)  # delivered, not acked: still held
    assert await bus.stored_messages(ns, Q, [4, 1, 2, 9]) == [(1, b"a"), (2, b"b"), (4, b"d")]
    await first.ack()  # acked: gone
    assert await bus.stored_messages(ns, Q, [1, 3]) == [(3, b"c")]
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None, admitting=False)
    assert await bus.stored_messages(ns, Q, [2]) == [(2, b"b")]
    assert await bus.stored_messages(ns, "nowhere", [1]) == []
    assert await bus.stored_messages(ns, Q, []) == []


async def test_counts_of_an_unknown_queue_are_zero(bus, ns) -> None:
    assert await bus.queue_counts(ns, Q, levels=10) == QueueCounts(0, 0, 0)


async def test_counts_split_pending_and_running(bus, ns, claim) -> None:
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b"), item("c"), item("d", 1)])
    claimed = await claim(bus, ns, Q, 0, 2)
    assert [(c.seq, c.payload) for c in claimed] == [(1, b"a"), (2, b"b")]
    assert await bus.queue_counts(ns, Q, levels=2) == QueueCounts(pending=2, running=2, depth=4)
    # An acked claim leaves the WorkQueue stream.
    await claimed[0].ack()
    assert await bus.queue_counts(ns, Q, levels=2) == QueueCounts(pending=2, running=1, depth=3)


async def test_the_backlog_is_what_is_stored_and_not_delivered(bus, ns, claim) -> None:
    assert await bus.queue_backlog(ns, Q, levels=2) == 0  # no stream yet
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b"), item("c", 1)])
    await claim(bus, ns, Q, 0, 1)
    assert await bus.queue_backlog(ns, Q, levels=2) == 2


@pytest.mark.parametrize("bus", ["nats"], indirect=True)  # a JetStream consumer's own group
async def test_a_backlog_whose_consumer_is_silent_is_the_streams_depth(bus, ns, claim) -> None:
    # A consumer elects its leader on its own after a NATS node comes back, and answers
    # nothing meanwhile; a deleted one answers nothing too. The stream alone then says how
    # much it holds (the claimed one included): the estimate errs high, and a submit that
    # reads it does not wait for the consumer.
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b"), item("c", 1)])
    await claim(bus, ns, Q, 0, 1)
    js = bus._js_short  # type: ignore[attr-defined]
    await js.delete_consumer(subjects.queue_stream(ns, Q), subjects.level_consumer(1))
    assert await bus.queue_backlog(ns, Q, levels=2) == 3


async def test_deleting_a_running_invocation_removes_it_from_the_counts(bus, ns, claim) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b")])
    [running] = await claim(bus, ns, Q, 0, 1)
    assert await bus.delete_message(ns, Q, running.seq)
    assert await bus.queue_counts(ns, Q, levels=1) == QueueCounts(pending=1, running=0, depth=1)


async def test_oldest_pending_spans_levels(bus, ns, claim) -> None:
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    await bus.publish_work(ns, Q, [item("one", 1), item("two", 0), item("three", 0)])
    assert await bus.oldest_pending(ns, Q, levels=2) == (1, b"one")
    await claim(bus, ns, Q, 1, 1)
    assert await bus.oldest_pending(ns, Q, levels=2) == (2, b"two")
    await claim(bus, ns, Q, 0, 1)
    assert await bus.oldest_pending(ns, Q, levels=2) == (3, b"three")
    await claim(bus, ns, Q, 0, 1)
    assert await bus.oldest_pending(ns, Q, levels=2) is None


async def test_oldest_pending_skips_deleted_invocations(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b")])
    assert await bus.delete_message(ns, Q, 1)
    assert await bus.oldest_pending(ns, Q, levels=1) == (2, b"b")


async def test_pending_messages_are_the_undelivered_ones_of_every_level(bus, ns, claim) -> None:
    # more than one batch of direct gets on level 0 (lakeshore.bus.nats.PENDING_BATCH)
    await bus.ensure_queue(ns, Q, levels=2, max_depth=None)
    n = 600
    await bus.publish_work(ns, Q, [item(f"a{i}") for i in range(n)])
    await bus.publish_work(ns, Q, [item("b0", 1), item("b1", 1)])
    await claim(bus, ns, Q, 0, 3)  # delivered: not pending any more
    await claim(bus, ns, Q, 1, 1)
    assert await bus.delete_message(ns, Q, 10)  # gone from the middle of a batch
    pending = await bus.pending_messages(ns, Q, levels=2, limit=10_000)
    wanted = [(i + 1, f"a{i}".encode()) for i in range(3, n) if i + 1 != 10]
    assert pending == [*wanted, (n + 2, b"b1")]
    assert await bus.pending_messages(ns, Q, levels=2, limit=300) == wanted[:300]
    assert await bus.pending_messages(ns, "nowhere", levels=1, limit=10) == []


@pytest.mark.parametrize("bus", ["nats"], indirect=True)
async def test_pending_messages_of_a_stream_made_without_direct_gets(bus, ns, claim) -> None:
    # a queue's stream made before they were allowed: read one by one until ensured again
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    await bus.publish_work(ns, Q, [item(f"a{i}") for i in range(5)])
    await claim(bus, ns, Q, 0, 1)
    js = bus.nc.jetstream()
    info = await js.stream_info(subjects.queue_stream(ns, Q))
    info.config.allow_direct = False
    await js.update_stream(info.config)
    expected = [(i + 1, f"a{i}".encode()) for i in range(1, 5)]
    assert await bus.pending_messages(ns, Q, levels=1, limit=10) == expected
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    assert (await js.stream_info(subjects.queue_stream(ns, Q))).config.allow_direct
    assert await bus.pending_messages(ns, Q, levels=1, limit=10) == expected


async def test_delete_message_twice_is_false(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    await bus.publish_work(ns, Q, [item("a")])
    assert await bus.delete_message(ns, Q, 1)
    assert not await bus.delete_message(ns, Q, 1)


async def test_delete_message_of_an_unknown_queue_is_false(bus, ns) -> None:
    assert not await bus.delete_message(ns, Q, 1)


async def test_delete_queue_removes_everything(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    await bus.publish_work(ns, Q, [item("a"), item("b")])
    await bus.delete_queue(ns, Q)
    await bus.delete_queue(ns, Q)  # absent: a no-op
    assert await bus.queue_counts(ns, Q, levels=1) == QueueCounts(0, 0, 0)
    with pytest.raises(Unavailable):
        await bus.publish_work(ns, Q, [item("c")])
    # Re-created, it starts afresh: sequences and msg_ids included.
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    assert await bus.publish_work(ns, Q, [item("a")]) == [new(1)]


# -- core NATS and the connection ----------------------------------------------------------


async def test_nudge_and_control_reach_their_subjects(bus, ns, listen) -> None:
    listener = await listen(bus, ns)
    control = DaemonControl(cancel="inv-1")
    await bus.nudge(ns, Q)
    await bus.send_control(ns, "w-1", control)
    assert set(await listener.heard(2)) == {
        (subjects.nudge_subject(ns, Q), b""),
        (subjects.daemon_control_subject(ns, "w-1"), codec.encode(control)),
    }


async def test_a_closed_bus_is_unavailable(bus, ns) -> None:
    await bus.ensure_queue(ns, Q, levels=1, max_depth=None)
    assert bus.connected
    await bus.close()
    assert not bus.connected
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: bus.ensure_queue(ns, Q, levels=1, max_depth=None),
        lambda: bus.queue_counts(ns, Q, levels=1),
        lambda: bus.publish_work(ns, Q, [item("a")]),
        lambda: bus.oldest_pending(ns, Q, levels=1),
        lambda: bus.delete_message(ns, Q, 1),
    ]
    for call in calls:
        with pytest.raises(Unavailable):
            await call()


# -- the events feed and results ------------------------------------------------------------


async def test_publish_events_reach_the_feed_in_order(bus, feed, ns) -> None:
    batches = [EventBatch(events=[event(ns, f"inv-{i}")]) for i in range(3)]
    for batch in batches:
        await bus.publish_events(ns, Q, batch)
    got = await fetch_n(feed, 3)
    assert [(d.seq, d.batch, d.delivered) for d in got] == [
        (1, batches[0], 1),
        (2, batches[1], 1),
        (3, batches[2], 1),
    ]


async def test_feed_fetch_returns_without_filling_the_batch(bus, feed, ns) -> None:
    for i in range(2):
        await bus.publish_events(ns, Q, EventBatch(events=[event(ns, f"inv-{i}")]))
    async with asyncio.timeout(WAIT_S / 2):
        got = await feed.fetch(100, timeout_s=WAIT_S)
    assert [d.seq for d in got] == [1, 2]


async def test_feed_fetch_waits_for_the_first_event(bus, feed, ns) -> None:
    fetching = asyncio.create_task(feed.fetch(10, timeout_s=WAIT_S))
    await bus.publish_events(ns, Q, EventBatch(events=[event(ns, "inv-1")]))
    async with asyncio.timeout(WAIT_S / 2):
        got = await fetching
    assert [d.seq for d in got] == [1]


async def test_feed_fetch_of_nothing_is_empty_after_its_timeout(feed) -> None:
    async with asyncio.timeout(WAIT_S):
        assert await feed.fetch(10, timeout_s=0.2) == []


async def test_a_fetched_delivery_is_not_handed_out_again_before_its_ack(bus, feed, ns) -> None:
    await bus.publish_events(ns, Q, EventBatch(events=[event(ns, "inv-1")]))
    await fetch_n(feed, 1)
    async with asyncio.timeout(WAIT_S):
        assert await feed.fetch(10, timeout_s=0.2) == []


async def test_acked_deliveries_are_not_fetched_again_and_progress_moves(bus, feed, ns) -> None:
    assert await feed.progress() == (0, 0)
    for i in range(3):
        await bus.publish_events(ns, Q, EventBatch(events=[event(ns, f"inv-{i}")]))
    first, second, third = await fetch_n(feed, 3)
    assert await feed.progress() == (0, 3)
    # The floor moves over a gap-free run of acks only.
    await feed.ack([second])
    await feed.ack([first])
    # An EventFeed ack is fire and forget: the consumer's ack floor catches up a moment later.
    await eventually(feed.progress, timeout_s=WAIT_S, every_s=0.01, until=lambda p: p == (2, 3))
    await feed.ack([third])
    await eventually(feed.progress, timeout_s=WAIT_S, every_s=0.01, until=lambda p: p == (3, 3))
    async with asyncio.timeout(WAIT_S):
        assert await feed.fetch(10, timeout_s=0.2) == []


async def test_events_naming_another_queue_are_dropped_from_their_batch(bus, feed, ns) -> None:
    mine = event(ns, "inv-1")
    await bus.publish_events(ns, Q, EventBatch(events=[mine, event(ns, "inv-2", queue="other")]))
    [delivery] = await fetch_n(feed, 1)
    assert delivery.batch == EventBatch(events=[mine])


async def test_get_result_reads_what_a_daemon_stored(bus, feed, ns, put_result) -> None:
    result = Result(id="inv-1", ok=True, value={"answer": 42}, worker="w-1", epoch=2)
    await put_result(bus, ns, "inv-1", 2, result)
    assert await feed.get_result(ns, "inv-1", 2) == result


async def test_get_result_of_an_absent_attempt_is_none(bus, feed, ns, put_result) -> None:
    await put_result(bus, ns, "inv-1", 1, Result(id="inv-1", ok=True, epoch=1))
    assert await feed.get_result(ns, "inv-1", 2) is None
    assert await feed.get_result(ns, "inv-2", 1) is None


# -- the twin's own test hooks (InMemoryBus only) --------------------------------------------


async def test_redeliver_hands_unacked_events_out_again_counting_deliveries() -> None:
    bus = InMemoryBus()
    feed = bus.feed()
    for i in range(2):
        await bus.publish_events("n", Q, EventBatch(events=[event("n", f"inv-{i}")]))
    first, second = await feed.fetch(10, timeout_s=0)
    await feed.ack([first])
    await bus.redeliver()
    [again] = await feed.fetch(10, timeout_s=0)
    assert (again.seq, again.delivered) == (second.seq, 2)


async def test_the_duplicate_window_expires() -> None:
    now = [0.0]
    bus = InMemoryBus(clock=lambda: now[0])
    await bus.ensure_queue("n", Q, levels=1, max_depth=None)
    assert await bus.publish_work("n", Q, [item("a")]) == [new(1)]
    now[0] = 599.0
    assert await bus.publish_work("n", Q, [item("a")]) == [Published(seq=1, duplicate=True)]
    now[0] = 601.0
    assert await bus.publish_work("n", Q, [item("a")]) == [new(2)]


async def test_a_result_watch_hears_the_puts_made_after_it(bus, feed, ns, put_result) -> None:
    await put_result(bus, ns, "inv-1", 1, Result(id="inv-1", ok=False, epoch=1))
    watch = await feed.watch_result(ns, "inv-1")
    try:
        if isinstance(bus, NatsBus):
            await bus.nc.flush()  # the subscription is in place before the put
        await put_result(bus, ns, "inv-1", 2, Result(id="inv-1", ok=True, value=7, epoch=2))
        heard = await eventually(lambda: watch.result(2), until=lambda r: r is not None,
                                 timeout_s=WAIT_S, what="the put to pass the watch")  # fmt: skip
        assert (heard.ok, heard.value, heard.epoch) == (True, 7, 2)
        assert await watch.result(3) is None
    finally:
        await watch.close()
