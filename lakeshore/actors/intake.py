"""Intake: a queue's admission workflow — ids and keys, publishing under ``on_full``, the
waiting room of a full ``block`` queue, and the ``submitted`` events (handed to the
:class:`~lakeshore.actors.outbox.Outbox`: a submit is answered once its work is stored).

Owned by the queue's :class:`~lakeshore.actors.queue.QueueActor`, which hands it the
current row; split from the actor so that the row's lifecycle and the submit path each
read on their own. The policies it composes are modules of their own:
:mod:`~lakeshore.actors.admission` (validation, ``on_full``),
:mod:`~lakeshore.actors.idempotency` (durable keys) and
:mod:`~lakeshore.actors.waiting` (the waiting room).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from lakeshore import fit, preparation, submission
from lakeshore.actors import admission
from lakeshore.actors.base import ActorRef
from lakeshore.actors.idempotency import DEFAULT_KEY_TTL_S, resolve_keys
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.waiting import Waiting, WaitingRoom
from lakeshore.actors.workers import Members
from lakeshore.bus import codec
from lakeshore.bus.port import Bus, Published
from lakeshore.errors import LakeshoreError, QueueFull, Unavailable
from lakeshore.faults import Faults
from lakeshore.futures import mark_retrieved
from lakeshore.model import (
    ElasticityKind,
    EventType,
    Invocation,
    InvocationEvent,
    InvocationSubmit,
    OnFull,
    Queue,
    SubmitAnswer,
    WorkerStatus,
    levels_of,
    now,
)
from lakeshore.preparation import Prepared
from lakeshore.store.port import IdempotencyKeys

log = logging.getLogger(__name__)

NO_FAULTS = Faults()
#: Most pending invocations a queue's removal records as cancelled, one by one.
MAX_CANCEL_ON_DELETE = 100_000


class Intake:
    """Args:
    namespace, queue: the queue.
    row: the queue's current row (the actor's).
    store: where idempotency keys are kept.
    bus: the queue's stream and the events stream.
    workers: the WorkerRegistry (the ``no_members`` warning).
    outbox: publishes the ``submitted`` events behind the answer.
    key_ttl_s: how long a key names its invocation (seconds).
    faults: fault points.
    """

    def __init__(
        self,
        namespace: str,
        queue: str,
        *,
        row: Callable[[], Queue],
        store: IdempotencyKeys,
        bus: Bus,
        workers: ActorRef[Any],
        outbox: Outbox,
        key_ttl_s: float = DEFAULT_KEY_TTL_S,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self._ns, self._queue, self._row = namespace, queue, row
        self._store, self._bus, self._workers, self._outbox = store, bus, workers, outbox
        self._key_ttl_s, self._faults = key_ttl_s, faults
        self._room = WaitingRoom(retry=self._retry, admit=self._admit, refuse=self._refuse)

    @property
    def waiting(self) -> int:
        """Submits waiting for room now."""
        return len(self._room)

    def wake(self) -> None:
        """The row changed (room, policy, state): retry the waiting submits now."""
        self._room.wake()

    async def close(self, error: LakeshoreError) -> None:
        """Refuse every waiting submit with ``error`` (the queue is going away)."""
        await self._room.close(error)

    async def submit(
        self, specs: list[InvocationSubmit], wait_s: float
    ) -> asyncio.Future[SubmitAnswer]:
        """Admit a submit; answers a future settled once it is in (at once unless a full
        ``block`` queue makes it wait in the waiting room)."""
        row = self.admitting()
        ids = await preparation.new_ids(len(specs))
        items = await preparation.prepare(row, specs, ids)  # refuses a bad batch before any key
        known: set[str] = set()
        if any(spec.idempotency_key for spec in specs):
            ids, known = await resolve_keys(
                self._store, self._ns, self._queue, specs, ids,
                ttl_s=self._key_ttl_s, faults=self._faults,
            )  # fmt: skip
            items = await preparation.prepare(row, specs, ids)
        waiting = Waiting(items, [None] * len(items), [], time.monotonic() + wait_s)
        for i, item in enumerate(items):
            if item.id in known:  # admitted before and recorded: nothing to publish again
                waiting.published[i] = Published(seq=0, duplicate=True)
        if self._room and row.on_full is OnFull.BLOCK:
            return self._room.park(waiting)  # behind the submits already waiting
        # Asked of the registry while the work is published (the answer does not depend
        # on it): the registry's turn then costs the submit nothing.
        warned = asyncio.ensure_future(self._warnings(row, items))
        warned.add_done_callback(mark_retrieved)  # unawaited when the submit fails first
        try:
            todo = [i for i, p in enumerate(waiting.published) if p is None]
            stored = await self._publish(row, [items[i] for i in todo])
            for i, outcome in zip(todo, stored, strict=True):
                waiting.published[i] = outcome
            self._faults.hit("submit.published")
            try:
                waiting.dropped = await admission.place(
                    self._bus, row, items, waiting.published, levels=levels_of(row.kind)
                )
            except QueueFull:
                self._record_admitted(waiting)
                raise
            if waiting.next_index < len(items):
                return self._room.park(waiting)
            waiting.answer.set_result(await self._admit(waiting, warned))
            return waiting.answer
        finally:
            warned.cancel()

    def admitting(self) -> Queue:
        """The row, if the queue admits work now.

        Raises:
            WrongState: it is draining or archived.
        """
        row = self._row()
        preparation.check_admitting(row)
        return row

    async def _retry(self, waiting: Waiting) -> bool:
        """The waiting room's retry: store the next items in order while there is room."""
        row = self.admitting()
        while (i := waiting.next_index) < len(waiting.items):
            if row.on_full is not OnFull.BLOCK:
                admission.full(row, i, len(waiting.items), f"on_full is now {row.on_full}")
            [outcome] = await self._publish(row, waiting.items[i : i + 1])
            if outcome is None:
                return False
            waiting.published[i] = outcome
        return True

    async def _publish(self, row: Queue, items: list[Prepared]) -> list[Published | None]:
        """Publish to the queue's stream (``None`` for each refused as full). A queue that
        stopped admitting while this was on its way (its row says so first, then its
        stream's subjects move aside) refuses as its row does.

        Raises:
            WrongState: the queue stopped admitting meanwhile.
            Unavailable: NATS failed otherwise.
        """
        try:
            return await admission.publish(self._bus, row, items)
        except Unavailable:
            preparation.check_admitting(self._row())  # it stopped admitting meanwhile
            raise

    async def _refuse(self, waiting: Waiting, why: LakeshoreError | None) -> LakeshoreError:
        """The waiting room's refusal: the error the asker gets (``QueueFull`` once its
        wait ran out), after recording what of the submit was stored."""
        self._record_admitted(waiting)
        if why is not None:
            return why
        try:
            admission.full(self._row(), waiting.next_index, len(waiting.items), "")
        except QueueFull as e:
            return e

    async def _admit(
        self, waiting: Waiting, warned: Awaitable[list[str]] | None = None
    ) -> SubmitAnswer:
        """Hand an admitted submit's events to the outbox, wake the daemons, answer it (with
        the ``warned`` warnings, when they were asked for already)."""
        row = self._row()
        self._record_admitted(waiting)
        self._faults.hit("submit.recorded")
        await self._bus.nudge(self._ns, row.name)
        items, published = waiting.items, waiting.published
        return SubmitAnswer(
            ids=[p.id for p in items],
            queue=row.name,
            namespace=self._ns,
            warnings=await (warned if warned is not None else self._warnings(row, items)),
            duplicates=[
                p.id for p, pub in zip(items, published, strict=True) if pub and pub.duplicate
            ],
        )

    def _record_admitted(self, waiting: Waiting) -> None:
        """Put the events of what a submit stored (and of what it evicted) in the outbox."""
        events = [*waiting.dropped, *admission.submitted_events(waiting.items, waiting.published)]
        self._outbox.put(self._ns, self._queue, events)

    async def _warnings(self, row: Queue, items: Sequence[Prepared]) -> list[str]:
        if row.elasticity.kind is not ElasticityKind.FIXED:
            return []
        members = await self._workers.ask(Members(self._ns, row.name))
        if not any(w.status is not WorkerStatus.LOST for w in members):
            return [
                f"no_members: queue {row.name!r} has no daemons and its elasticity is fixed; "
                f"the work waits until one joins (lakeshore daemon launch --queue {row.name})"
            ]
        out = []
        asked = (i.spec.resources for i in items)
        for r in dict.fromkeys(r for r in asked if fit.asks_for_something(r)):
            assert r is not None
            if (why := fit.infeasible(r, members)) is not None:
                out.append(
                    f"{why}; no daemon of queue {row.name!r} could ever run it, and its "
                    f"elasticity is fixed: it waits until one that can joins "
                    f"(lakeshore daemon run --queue {row.name} on such a host)"
                )
        return out

    async def cancel_all_pending(self, actor: str | None) -> int:
        """Record every invocation still pending as ``cancelled`` (reason ``queue_deleted``)
        before its stream goes; running ones finish on their daemons and are recorded."""
        pending = await self._bus.pending_messages(
            self._ns, self._queue, levels=levels_of(self._row().kind), limit=MAX_CANCEL_ON_DELETE
        )
        ts = now()
        events = []
        for seq, payload in pending:
            try:
                inv = codec.decode(payload, Invocation)
            except msgspec.DecodeError:
                continue  # not an invocation: nothing to record
            # What it was goes with it: the history may not have heard of it yet.
            record = submission.carried(inv, seq, len(payload))
            events.append(
                InvocationEvent(
                    namespace=self._ns,
                    queue=self._queue,
                    invocation_id=inv.id,
                    ts=ts,
                    type=EventType.CANCELLED,
                    detail={
                        "seq": seq,
                        "by": actor,
                        "reason": "queue_deleted",
                        submission.CARRIED: record,
                    },
                )  # fmt: skip
            )
        for batch in admission.event_batches(events):
            await self._bus.publish_events(self._ns, self._queue, batch)
        return len(events)
