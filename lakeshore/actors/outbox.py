"""The outbox: the ``submitted`` events of admitted work, published behind the answer.

A submit is answered once its invocations are stored in their queue's stream: that message
is durable and says everything its ``submitted`` record does (:mod:`lakeshore.submission`).
Its events are put here and published to ``LS_EVENTS`` in the background — what was put
while a publish was out goes in the next one, one batch per queue — each retried until it is
stored. What a control plane does not live to publish is recorded all the same: a daemon's
claim carries the record, and a new term announces every undelivered invocation without one
(:mod:`lakeshore.services.unrecorded`); a record published twice is recorded once.

So a ``submitted`` event need not be published at all when its invocation's claim came
first: the outbox lingers (:data:`LINGER_S`) before it publishes, asks the Recorder which
of the invocations it holds it has recorded (from its memory: no store read on this path;
one it no longer holds is published, and recorded once), and leaves out the ``submitted``
events of those whose record the claim carried in full (``submission.carried_in_full``). A
job claimed at once — the common case of a warm queue — then costs the events stream one
message less; what waits in its queue is published after the linger, as before.

Reads that must see this plane's own answered submits (a job listed or shown right after its
submit) wait for :meth:`Outbox.flushed` before they catch up with the Recorder; a result
wait asks :meth:`Outbox.holds` instead of waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable

from lakeshore import submission
from lakeshore.actors.admission import event_batches
from lakeshore.bus.port import Bus
from lakeshore.errors import LakeshoreError
from lakeshore.model import EventBatch, EventType, InvocationEvent

log = logging.getLogger(__name__)

#: First and longest pause between two tries of a publish that failed (seconds).
RETRY_S = (0.05, 2.0)
#: Longest a stop waits for what is still in the outbox (seconds).
CLOSE_S = 2.0
#: How long what is put waits before it is published, so that a claim can come first
#: (seconds); a read that waits for the outbox does not wait for it.
LINGER_S = 0.05

Key = tuple[str, str]
#: Which of these ids (of a namespace) have no ``submitted`` event recorded.
Unrecorded = Callable[[str, list[str]], Awaitable[list[str]]]


class Outbox:
    """Args:
    bus: where the events go (``publish_events``).
    retry_s: first and longest pause between two tries of a failed publish (seconds).
    linger_s: how long what is put waits before it is published (seconds).
    unrecorded: asks the Recorder which ids are unrecorded (``None``: publish every event).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        retry_s: tuple[float, float] = RETRY_S,
        linger_s: float = 0.0,
        unrecorded: Unrecorded | None = None,
    ) -> None:
        self._bus, self._retry_s = bus, retry_s
        self._linger_s, self._unrecorded = linger_s, unrecorded
        self._waiting: list[tuple[str, str, list[InvocationEvent]]] = []
        #: (namespace, invocation id) of every event put and not stored yet
        self._held: Counter[Key] = Counter()
        self._put = 0  # puts so far
        self._stored = 0  # of them, stored
        self._seq = 0  # LS_EVENTS sequence of the newest message published
        self._flushes: list[tuple[int, asyncio.Future[int]]] = []
        self._wake = asyncio.Event()
        self._hurry = asyncio.Event()  # someone waits for what was put: no linger
        self._skipped = 0  # submitted events left out: their claims carried the record
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def put(self, namespace: str, queue: str, events: list[InvocationEvent]) -> None:
        """Publish ``events`` of ``queue`` soon (in the order put)."""
        if not events:
            return
        if self._closed:
            log.warning(
                "%d event(s) of %s/%s put after the outbox closed: the next term records "
                "them from the queue's stream",
                len(events), namespace, queue,
            )  # fmt: skip
            return
        self._waiting.append((namespace, queue, events))
        self._held.update((namespace, ev.invocation_id) for ev in events)
        self._put += 1
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="outbox")

    def holds(self, namespace: str, inv_id: str) -> bool:
        """Whether an event of the invocation is put and not stored yet."""
        return (namespace, inv_id) in self._held

    @property
    def skipped(self) -> int:
        """``submitted`` events left out so far because the claim's record came first."""
        return self._skipped

    @property
    def backlog(self) -> int:
        """Events put and not stored yet."""
        return self._held.total()

    def flushed(self) -> asyncio.Future[int]:
        """A future resolved once everything put so far is stored, with the ``LS_EVENTS``
        sequence of the newest message published (0: none yet); cancel it to stop waiting."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self._stored >= self._put:
            fut.set_result(self._seq)
        else:
            self._flushes.append((self._put, fut))
            self._hurry.set()
        return fut

    async def close(self, timeout_s: float = CLOSE_S) -> None:
        """Take no more events; publish what was put, for ``timeout_s`` at most."""
        self._closed = True
        if self._task is None:
            return
        flushed = self.flushed()
        try:
            async with asyncio.timeout(timeout_s):
                await flushed
        except TimeoutError:
            log.warning(
                "%d event(s) not published before the stop: the next term records them "
                "from the queues' streams",
                self.backlog,
            )
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        for _, fut in self._flushes:
            fut.cancel()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            if self._linger_s > 0 and not self._hurry.is_set():
                try:
                    async with asyncio.timeout(self._linger_s):
                        await self._hurry.wait()
                except TimeoutError:
                    pass
            self._wake.clear()
            self._hurry.clear()
            taken, self._waiting, upto = self._waiting, [], self._put
            by_queue: dict[Key, list[InvocationEvent]] = defaultdict(list)
            for ns, queue, events in taken:
                by_queue[(ns, queue)] += events
            for (ns, queue), events in by_queue.items():
                for batch in event_batches(await self._unclaimed(ns, events)):
                    await self._publish(ns, queue, batch)
            self._stored = upto
            for ns, _, events in taken:
                self._held.subtract((ns, ev.invocation_id) for ev in events)
            self._held = +self._held  # drops what reached 0
            self._resolve()

    async def _unclaimed(self, ns: str, events: list[InvocationEvent]) -> list[InvocationEvent]:
        """``events`` without the ``submitted`` ones whose invocation's claim was recorded
        first, carrying the same record (all of them when the Recorder cannot say)."""
        submitted = {ev.invocation_id for ev in events if ev.type is EventType.SUBMITTED}
        if not submitted or self._unrecorded is None:
            return events
        try:
            unrecorded = set(await self._unrecorded(ns, sorted(submitted)))
        except (LakeshoreError, TimeoutError) as e:
            log.debug("outbox: the Recorder did not say what it recorded (%s)", e)
            return events
        if not submitted - unrecorded:
            return events  # nothing claimed yet (a queue with a backlog): no record weighed
        kept = [
            ev
            for ev in events
            if ev.type is not EventType.SUBMITTED
            or ev.invocation_id in unrecorded
            or not submission.carried_in_full(ev.detail)
        ]
        self._skipped += len(events) - len(kept)
        return kept

    async def _publish(self, ns: str, queue: str, batch: EventBatch) -> None:
        """Publish one batch, tried again until it is stored."""
        tries = 0
        while True:
            try:
                seq = await self._bus.publish_events(ns, queue, batch)
            except (LakeshoreError, TimeoutError) as e:
                tries += 1
                if tries == 1:
                    log.warning(
                        "%d event(s) of %s/%s not recorded yet (%s): tried again until they are",
                        len(batch.events), ns, queue, e,
                    )  # fmt: skip
                first, longest = self._retry_s
                await asyncio.sleep(min(longest, first * 2 ** (tries - 1)))
                continue
            if tries:
                log.info("events of %s/%s recorded after %d failed tries", ns, queue, tries)
            self._seq = max(self._seq, seq)
            return

    def _resolve(self) -> None:
        still = []
        for target, fut in self._flushes:
            if fut.done():
                continue
            if target <= self._stored:
                fut.set_result(self._seq)
            else:
                still.append((target, fut))
        self._flushes = still
