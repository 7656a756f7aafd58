"""A ``block`` queue's waiting room: a submit to a full queue waits outside the actor's
inbox — the queue keeps answering — and is let in, in arrival order, or refused."""

from __future__ import annotations

import asyncio

import pytest

from lakeshore.actors import waiting
from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.directory import CreateQueue, DirectoryMsg, Lookup, RemoveQueue
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.queue import CountWaiting, GetQueue, PatchQueue, QueueMsg, Submit, Transition
from lakeshore.bus.memory import InMemoryBus
from lakeshore.errors import QueueFull, QueueNotFound, WrongState
from lakeshore.model import (
    EventType,
    InvocationSubmit,
    OnFull,
    QueueCreate,
    QueuePatch,
    SubmitAnswer,
)

from .conftest import SpawnQueue
from .support import NS, call, published, settle, stored_ids


async def blocked(spawn_queue: SpawnQueue, max_depth: int = 1) -> ActorRef[QueueMsg]:
    """A ``block`` queue already full."""
    ref = await spawn_queue("q", max_depth=max_depth, on_full=OnFull.BLOCK)
    specs = [call(n) for n in range(max_depth)]
    await settle(await ref.ask(Submit(specs, actor=None)))
    return ref


async def wait(
    ref: ActorRef[QueueMsg], *specs: InvocationSubmit, wait_s: float = 30.0
) -> asyncio.Future[SubmitAnswer]:
    """Submit to a full queue: the answer is a future that is not done yet."""
    future = await ref.ask(Submit(list(specs or [call(99)]), actor=None, wait_s=wait_s))
    assert not future.done()
    return future


@pytest.fixture
def no_retries_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The room retries only when woken (a patch, a transition), never after a backoff:
    what a test makes of the stream behind the actor's back cannot race it."""
    monkeypatch.setattr(waiting, "BACKOFF_S", (60.0, 1.0, 60.0))


async def test_a_blocked_submit_waits_while_the_queue_keeps_answering(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await blocked(spawn_queue)
    future = await wait(ref)
    assert (await ref.ask(GetQueue())).max_depth == 1
    assert await ref.ask(CountWaiting()) == 1
    assert not future.done()
    assert len(await published(outbox, bus, EventType.SUBMITTED)) == 1  # only the first submit's
    assert bus.nudges == [(NS, "q")]
    future.cancel()  # the asker gave up: the room forgets it


async def test_a_blocked_submit_is_let_in_by_a_patch_that_makes_room(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await blocked(spawn_queue)
    future = await wait(ref)
    await ref.ask(PatchQueue(QueuePatch(max_depth=2), actor=None))
    answer = await settle(future)
    assert len(answer.ids) == 1 and answer.queue == "q"
    assert answer.ids[0] in stored_ids(bus, "q")
    [_, admitted] = await published(outbox, bus, EventType.SUBMITTED)
    assert admitted.invocation_id == answer.ids[0]
    assert (admitted.detail or {})["seq"] == 2
    assert bus.nudges == [(NS, "q")] * 2
    assert await ref.ask(CountWaiting()) == 0


async def test_waiting_submits_are_admitted_in_arrival_order(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await blocked(spawn_queue)
    first = await wait(ref, call(1))
    second = await wait(ref, call(2))
    assert await ref.ask(CountWaiting()) == 2
    await ref.ask(PatchQueue(QueuePatch(max_depth=2), actor=None))  # room for one
    [a] = (await settle(first)).ids
    assert not second.done()
    assert await ref.ask(CountWaiting()) == 1
    await ref.ask(PatchQueue(QueuePatch(max_depth=3), actor=None))
    [b] = (await settle(second)).ids
    assert stored_ids(bus, "q")[1:] == [a, b]
    seqs = {
        e.invocation_id: (e.detail or {})["seq"]
        for e in await published(outbox, bus, EventType.SUBMITTED)
    }
    assert seqs[a] < seqs[b]


@pytest.mark.usefixtures("no_retries_of_its_own")
async def test_a_new_submit_queues_behind_waiting_ones_even_when_there_is_room(
    spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await blocked(spawn_queue)
    early = await wait(ref, call(1))
    [(seq, _)] = bus.claim(NS, "q", 0, 1)
    bus.ack(NS, "q", seq)  # a daemon finished the first: there is room for one now
    late = await wait(ref, call(2))  # it does not take the room the early one waits for
    assert await ref.ask(CountWaiting()) == 2
    await ref.ask(PatchQueue(QueuePatch(description="wake up"), actor=None))
    [a] = (await settle(early)).ids
    assert not late.done()
    await ref.ask(PatchQueue(QueuePatch(max_depth=2), actor=None))
    [b] = (await settle(late)).ids
    assert stored_ids(bus, "q") == [a, b]


async def test_a_wait_that_runs_out_is_refused_as_queue_full(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await blocked(spawn_queue)
    future = await wait(ref, wait_s=0.05)
    with pytest.raises(QueueFull, match="queue 'q' is full: max_depth 1 reached"):
        await settle(future)
    assert len(stored_ids(bus, "q")) == 1
    assert len(await published(outbox, bus, EventType.SUBMITTED)) == 1
    assert await ref.ask(CountWaiting()) == 0


async def test_a_batch_admitted_in_part_waits_for_the_rest(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q", max_depth=2, on_full=OnFull.BLOCK)
    future = await wait(ref, call(0), call(1), call(2))
    assert len(stored_ids(bus, "q")) == 2  # the first two are stored already
    await ref.ask(PatchQueue(QueuePatch(max_depth=5), actor=None))
    answer = await settle(future)
    assert len(answer.ids) == 3
    # announced together once the whole submit is in
    assert [
        e.invocation_id for e in await published(outbox, bus, EventType.SUBMITTED)
    ] == answer.ids
    assert bus.nudges == [(NS, "q")]


async def test_a_batch_whose_wait_runs_out_midway_records_what_was_admitted(
    outbox: Outbox, spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await spawn_queue("q", max_depth=2, on_full=OnFull.BLOCK)
    future = await wait(ref, call(0), call(1), call(2), wait_s=0.05)
    with pytest.raises(QueueFull, match="the first 2 of 3 were admitted"):
        await settle(future)
    stored = stored_ids(bus, "q")
    assert [e.invocation_id for e in await published(outbox, bus, EventType.SUBMITTED)] == stored
    assert len(stored) == 2


async def test_draining_the_queue_refuses_its_waiting_submits(
    spawn_queue: SpawnQueue, bus: InMemoryBus
) -> None:
    ref = await blocked(spawn_queue)
    future = await wait(ref)
    await ref.ask(Transition("drain", actor=None))
    with pytest.raises(WrongState, match="queue 'q' is draining; cannot accept submissions"):
        await settle(future)
    assert len(stored_ids(bus, "q")) == 1


async def test_switching_on_full_to_reject_refuses_the_waiting_submits(
    spawn_queue: SpawnQueue,
) -> None:
    ref = await blocked(spawn_queue)
    future = await wait(ref)
    await ref.ask(PatchQueue(QueuePatch(on_full=OnFull.REJECT), actor=None))
    with pytest.raises(QueueFull, match="on_full is now reject"):
        await settle(future)


@pytest.mark.usefixtures("no_retries_of_its_own")
async def test_deleting_the_queue_refuses_its_waiting_submits(
    directory: ActorRef[DirectoryMsg],
) -> None:
    body = QueueCreate(name="q", max_depth=1, on_full=OnFull.BLOCK)
    await directory.ask(CreateQueue(NS, body, actor=None))
    ref = await directory.ask(Lookup(NS, "q"))
    await settle(await ref.ask(Submit([call(0)], actor=None)))
    future = await wait(ref)
    await directory.ask(RemoveQueue(NS, "q", force=False, actor=None))
    with pytest.raises(QueueNotFound, match="queue 'q' does not exist"):
        await settle(future)


async def test_stopping_the_queue_actor_refuses_its_waiting_submits(
    runtime: Runtime, spawn_queue: SpawnQueue
) -> None:
    ref = await blocked(spawn_queue)
    future = await wait(ref)
    await runtime.stop(ref)
    with pytest.raises(QueueNotFound):
        await settle(future)
