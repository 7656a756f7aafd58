"""Admission policy of a queue: what happens when it is full (a submit's invocations are
validated, given ids and encoded by :mod:`lakeshore.preparation`).

``reject`` answers 429; ``drop_oldest`` evicts the oldest *pending* invocation (never a
running one) and records it as ``dropped``; ``block`` waits for room until the submit's
``wait_s`` runs out, then answers 429 — in :mod:`lakeshore.actors.waiting`, outside the
queue actor's inbox, so the queue keeps answering while a submit waits.
"""

from __future__ import annotations

import logging

from lakeshore import submission
from lakeshore.bus import codec
from lakeshore.bus.port import Bus, Published
from lakeshore.model import (
    EventBatch,
    EventType,
    Invocation,
    InvocationEvent,
    OnFull,
    Queue,
    now,
)
from lakeshore.preparation import Prepared, full

log = logging.getLogger(__name__)

#: An event batch is cut at about this size, well within one NATS message (bytes).
MAX_EVENT_BATCH_BYTES = 256 * 1024
_encode = codec.encode


async def place(
    bus: Bus, row: Queue, items: list[Prepared], published: list[Published | None], *, levels: int
) -> list[InvocationEvent]:
    """Settle the items the stream refused (``None`` in ``published``) under ``reject`` or
    ``drop_oldest``, in order; never waits. ``published`` is filled in place.

    Under ``block`` nothing is done: the caller parks the submit in its
    :class:`~lakeshore.actors.waiting.WaitingRoom` (the actor must not sleep on it).

    Returns:
        The ``dropped`` events of evicted invocations.

    Raises:
        QueueFull: ``reject`` (or ``drop_oldest`` with every stored invocation running);
            says how many were admitted.
    """
    dropped: list[InvocationEvent] = []
    if row.on_full is OnFull.BLOCK:
        return dropped
    for i, outcome in enumerate(published):
        while outcome is None:
            if row.on_full is not OnFull.DROP_OLDEST:
                full(row, i, len(items))
            oldest = await bus.oldest_pending(row.namespace, row.name, levels=levels)
            if oldest is None:
                full(row, i, len(items), "every stored invocation is running")
            elif await bus.delete_message(row.namespace, row.name, oldest[0]):
                dropped.append(_dropped_event(row, *oldest))
            [outcome] = await publish(bus, row, items[i : i + 1])
        published[i] = outcome
    return dropped


async def publish(bus: Bus, row: Queue, items: list[Prepared]) -> list[Published | None]:
    """Publish ``items`` to the queue's stream; ``None`` for each refused as full."""
    return await bus.publish_work(
        row.namespace, row.name, [(p.payload, p.level, p.msg_id) for p in items]
    )


def _dropped_event(row: Queue, seq: int, payload: bytes) -> InvocationEvent:
    evicted = codec.decode(payload, Invocation)
    log.info("invocation %s dropped from full queue %s/%s", evicted.id, row.namespace, row.name)
    return InvocationEvent(
        namespace=row.namespace,
        queue=row.name,
        invocation_id=evicted.id,
        ts=now(),
        type=EventType.DROPPED,
        # What it was goes with it: the drop may be the first the history hears of it.
        detail={
            "seq": seq,
            "reason": "on_full drop_oldest",
            submission.CARRIED: submission.carried(evicted, seq, len(payload)),
        },
    )


def submitted_events(
    items: list[Prepared], published: list[Published | None]
) -> list[InvocationEvent]:
    """The ``submitted`` events of the items stored now: neither refused nor duplicates (a
    duplicate's first submit stored its message, whose record is made by the outbox, its
    claim, or a new term's look at the queue's stream).

    Each is :func:`lakeshore.submission.submitted`, whose record a daemon's claim carries
    too (the record is made from the claim when this event is missing).
    """
    ts = now()
    return [
        submission.submitted(p.inv, pub.seq, len(p.payload), ts)
        for p, pub in zip(items, published, strict=True)
        if pub is not None and not pub.duplicate
    ]


def event_batches(
    events: list[InvocationEvent], size: int = 1000, max_bytes: int = MAX_EVENT_BATCH_BYTES
) -> list[EventBatch]:
    """Split events into batches that fit in one NATS message: at most ``size`` events and
    about ``max_bytes`` (a ``submitted`` event carries the invocation's command)."""
    if len(events) <= 1:
        return [EventBatch(events=events)] if events else []
    batches: list[EventBatch] = []
    start, used = 0, 0
    for i, ev in enumerate(events):
        n = len(_encode(ev))
        if i > start and (i - start >= size or used + n > max_bytes):
            batches.append(EventBatch(events=events[start:i]))
            start, used = i, 0
        used += n
    if start < len(events):
        batches.append(EventBatch(events=events[start:]))
    return batches
