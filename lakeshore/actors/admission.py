"""Admission policy of a queue: validating submits, ids, and what happens when it is full.

``reject`` answers 429; ``drop_oldest`` evicts the oldest *pending* invocation (never a
running one) and records it as ``dropped``; ``block`` waits for room until the submit's
``wait_s`` runs out, then answers 429 — in :mod:`lakeshore.actors.waiting`, outside the
queue actor's inbox, so the queue keeps answering while a submit waits.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import NoReturn

import msgspec

from lakeshore import submission
from lakeshore.actors.turns import pause
from lakeshore.bus import codec
from lakeshore.bus.port import Bus, Published
from lakeshore.errors import Invalid, QueueFull, TooLarge
from lakeshore.ids import new_id
from lakeshore.model import (
    EventBatch,
    EventType,
    Invocation,
    InvocationEvent,
    InvocationSubmit,
    Isolation,
    OnFull,
    Queue,
    QueueKind,
    check_depth,
    check_max_lost,
    check_resources,
    check_stop_grace,
    now,
)

log = logging.getLogger(__name__)

_FN_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
#: NATS' default max payload; an invocation must fit in one message.
MAX_PAYLOAD_BYTES = 1024 * 1024
#: An event batch is cut at about this size, well within one NATS message (bytes).
MAX_EVENT_BATCH_BYTES = 256 * 1024
_encode = codec.encode


@dataclass(frozen=True, slots=True)
class Prepared:
    id: str
    msg_id: str
    level: int
    #: the encoded :class:`Invocation`, ``env`` values and all: never shown
    payload: bytes = field(repr=False)
    spec: InvocationSubmit
    #: what ``payload`` encodes (its ``repr`` masks the ``env`` values)
    inv: Invocation


async def new_ids(n: int) -> list[str]:
    """``n`` fresh invocation ids, made in turns (:mod:`lakeshore.actors.turns`)."""
    ids: list[str] = []
    for i in range(n):
        await pause(i)
        ids.append(new_id())
    return ids


async def prepare(row: Queue, specs: list[InvocationSubmit], ids: list[str]) -> list[Prepared]:
    """Validate every invocation of a submit and encode it with its id, in turns
    (:mod:`lakeshore.actors.turns`); all or nothing.

    Raises:
        Invalid: an invocation is malformed (the message says which, by index).
        TooLarge: an invocation does not fit in one message.
    """
    out: list[Prepared] = []
    submitted_at = now()
    batch = ids[0] if len(specs) > 1 else None
    for i, spec in enumerate(specs):
        await pause(i)
        where = f"invocation {i}" if len(specs) > 1 else "the invocation"
        spec = with_queue_defaults(row, with_queue_code(row, spec))
        _check(row, spec, where)
        inv_id = ids[i]
        inv = Invocation(
            id=inv_id,
            namespace=row.namespace,
            queue=row.name,
            fn=spec.fn,
            args=spec.args,
            kwargs=spec.kwargs,
            command=spec.command,
            env=spec.env,
            priority=spec.priority,
            timeout_s=spec.timeout_s,
            max_attempts=spec.max_attempts,
            submitted_at=submitted_at,
            stop_grace_s=spec.stop_grace_s,
            isolation=spec.isolation,
            max_lost=spec.max_lost,
            code=spec.code,
            resources=spec.resources,
            idempotency_key=spec.idempotency_key,
            batch=batch,
            retry_of=spec.retry_of,
        )
        payload = codec.encode(inv)
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise TooLarge(
                f"{where} is {len(payload)} bytes encoded, more than {MAX_PAYLOAD_BYTES}; "
                "pass large inputs by reference (a path or URL) instead of in args"
            )
        # The Nats-Msg-Id is the id: a retried key resolves to the same id (durably, see
        # idempotency.py), so JetStream deduplicates it too inside its window.
        out.append(Prepared(inv_id, inv_id, spec.priority, payload, spec, inv))
    return out


def with_queue_code(row: Queue, spec: InvocationSubmit) -> InvocationSubmit:
    """``spec`` with its queue's code when it names none (an inline function keeps none:
    it runs in the daemon's own process)."""
    if spec.code is not None or row.code is None:
        return spec
    if spec.fn is not None and spec.isolation is Isolation.INLINE:
        return spec
    return msgspec.structs.replace(spec, code=row.code)


def with_queue_defaults(row: Queue, spec: InvocationSubmit) -> InvocationSubmit:
    """``spec`` with its queue's default resources when it names none of its own."""
    if spec.resources is not None or row.defaults is None or row.defaults.resources is None:
        return spec
    return msgspec.structs.replace(spec, resources=row.defaults.resources)


def _check(row: Queue, spec: InvocationSubmit, where: str) -> None:
    if (spec.fn is None) == (spec.command is None):
        raise Invalid(f"{where} needs exactly one of fn ('module:qualname') or command (argv)")
    if spec.fn is not None and not _FN_RE.match(spec.fn):
        raise Invalid(f"{where}: fn {spec.fn!r} must look like 'package.module:function'")
    if spec.command is not None and not spec.command:
        raise Invalid(f"{where}: command must be a non-empty argv list")
    check_depth(f"{where}: args", spec.args)
    check_depth(f"{where}: kwargs", spec.kwargs)
    check_stop_grace(where, spec.stop_grace_s)
    check_max_lost(where, spec.max_lost)
    if spec.command and spec.isolation is Isolation.INLINE:
        raise Invalid(
            f"{where}: isolation 'inline' is for functions (fn); a command always runs in "
            "a process of its own: leave isolation out"
        )
    if spec.resources is not None:
        check_resources(where, spec.resources)
        if spec.resources.gpus and spec.fn is not None and spec.isolation is Isolation.INLINE:
            raise Invalid(
                f"{where}: isolation 'inline' runs on the daemon's own thread, which cannot "
                "hold devices: leave isolation out to ask for GPUs (a worker process gets them)"
            )
    if spec.code is not None and spec.fn is not None and spec.isolation is Isolation.INLINE:
        raise Invalid(
            f"{where}: isolation 'inline' runs on the daemon's own thread, which cannot take "
            "a code snapshot: leave isolation out (a worker process runs the snapshot)"
        )
    if spec.priority and row.kind is QueueKind.FIFO:
        raise Invalid(
            f"{where} has priority {spec.priority} but queue {row.name!r} is fifo; "
            "priorities need a queue created with --kind priority"
        )


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


def full(row: Queue, index: int, total: int, why: str = "") -> NoReturn:
    """Raise the :class:`QueueFull` of a submit whose ``index``-th item found no room."""
    admitted = f"; the first {index} of {total} were admitted" if index else ""
    reason = f" ({why})" if why else ""
    raise QueueFull(
        f"queue {row.name!r} is full: max_depth {row.max_depth} reached{reason}{admitted}; "
        "retry later, raise --max-depth, or set --on-full block / drop_oldest"
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
