"""Submissions stored without their record: found and announced when a term begins.

A submit's messages are stored before its ``submitted`` events are; a control plane that
dies in between leaves invocations the history does not know. Whoever touches such an
invocation first carries its record (:mod:`lakeshore.submission`): the daemon that claims
it, the drop that evicts it, the removal of its queue. What nobody touched yet — stored,
not delivered — is found here: when a leadership term begins, once the Recorder has read
``LS_EVENTS`` to its end, every queue's undelivered messages are read
(:meth:`~lakeshore.bus.port.Bus.pending_messages`) and those the history has no record of
are announced, their ``submitted`` events published as their submit would have (the
Recorder records one per invocation, so one announced twice — a submit racing this —
is recorded once).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec

from lakeshore import submission
from lakeshore.actors.admission import event_batches
from lakeshore.actors.base import ActorRef
from lakeshore.actors.recorder import Unrecorded, WaitRecorded
from lakeshore.bus import codec
from lakeshore.bus.port import Bus, Feed
from lakeshore.errors import LakeshoreError
from lakeshore.model import Invocation, Queue, levels_of
from lakeshore.store.port import QueueRows

log = logging.getLogger(__name__)

#: Most undelivered invocations of one queue read (as a queue's removal reads them).
MAX_READ = 100_000
#: How long the Recorder is given to read ``LS_EVENTS`` to its end first (seconds).
CATCH_UP_S = 30.0
#: First and longest pause between two looks that failed (seconds).
RETRY_S = (0.5, 10.0)


async def announce_unrecorded(
    queues: QueueRows, bus: Bus, events: Feed, recorder: ActorRef[Any]
) -> int:
    """Announce every undelivered invocation the history has no record of; how many.

    Raises:
        LakeshoreError: NATS or the Recorder did not answer (nothing half-announced: what
            was published is recorded, the rest is found at the next term's start).
    """
    _, last = await events.progress()
    caught_up = await recorder.ask(WaitRecorded(last))
    async with asyncio.timeout(CATCH_UP_S):
        await caught_up
    announced = 0
    rows = await queues.all_queues()
    for row in rows:
        announced += await _announce_queue(row, bus, recorder)
    if announced:
        log.warning(
            "found %d stored invocation(s) without a record (a control plane died inside "
            "their submit): announced now",
            announced,
        )
    else:
        log.info("found no stored invocation without a record (%d queue(s) read)", len(rows))
    return announced


async def _announce_queue(row: Queue, bus: Bus, recorder: ActorRef[Any]) -> int:
    pending = await bus.pending_messages(
        row.namespace, row.name, levels=levels_of(row.kind), limit=MAX_READ
    )
    stored: dict[str, tuple[int, bytes, Invocation]] = {}
    for seq, payload in pending:
        try:
            inv = codec.decode(payload, Invocation)
        except msgspec.DecodeError:
            continue  # not an invocation: a daemon terminates it when it claims it
        stored[inv.id] = (seq, payload, inv)
    if not stored:
        return 0
    missing = await recorder.ask(Unrecorded(row.namespace, list(stored)))
    made = []
    for inv_id in missing:
        seq, payload, inv = stored[inv_id]
        made.append(
            submission.submitted(inv, seq, len(payload), inv.submitted_at, recorded_from="stream")
        )
    for batch in event_batches(made):
        await bus.publish_events(row.namespace, row.name, batch)
    return len(made)


async def announce_in_background(
    queues: QueueRows, bus: Bus, events: Feed, recorder: ActorRef[Any]
) -> None:
    """:func:`announce_unrecorded`, tried again after a failure (a queue's stream still
    electing its leader after a NATS node was lost, above all) until it succeeds or the
    term ends: what it finds is nowhere else until a daemon claims it. Announcing twice
    is harmless (recorded once)."""
    pause_s = RETRY_S[0]
    while True:
        try:
            await announce_unrecorded(queues, bus, events, recorder)
            return
        except (LakeshoreError, TimeoutError) as e:
            log.warning("stored invocations without a record were not looked for yet (%s): "
                        "again in %gs", e, pause_s)  # fmt: skip
        await asyncio.sleep(pause_s)
        pause_s = min(2 * pause_s, RETRY_S[1])
