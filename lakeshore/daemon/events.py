"""Batched publisher of lifecycle events, one buffer per queue.

A job that must not ack before its outcome is recorded awaits
:meth:`EventPublisher.publish`, which returns once the batch holding the event is stored in
JetStream; such an event is flushed at once (one turn of the event loop collects what the
running jobs reported together), with whatever else is buffered. Events nobody waits for
(``claimed``, ``started``) linger up to :data:`LINGER_S` for company: a short run reports
its claim, start and end in one message instead of two. While one batch is being
published the next ones gather: a busy daemon sends few large batches. Each batch carries
a ``Nats-Msg-Id``, so a retried publish (the first may have been stored although its
answer was lost) is deduplicated by JetStream. A batch that
cannot be published stays buffered, in order, and is retried with a growing pause.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections import defaultdict, deque
from typing import Protocol

from lakeshore.errors import LakeshoreError
from lakeshore.model import EventBatch, InvocationEvent

log = logging.getLogger(__name__)

#: Longest wait of an event nobody waits for, for others to share its message (seconds).
LINGER_S = 0.005
#: Pause before the first retry of a failed publish (seconds).
FLUSH_S = 0.020
#: Events per batch; a buffer this full is flushed at once.
MAX_BATCH = 256
#: Longest pause between retries while publishing fails (seconds).
MAX_RETRY_S = 1.0


class Publisher(Protocol):
    """Where a batch goes; :class:`~lakeshore.bus.work.WorkBus` is one."""

    async def publish_events(
        self, namespace: str, queue: str, batch: EventBatch, *, msg_id: str
    ) -> None: ...


class EventPublisher:
    """Collects events with :meth:`emit`; :meth:`run` flushes them until cancelled.

    Args:
        bus: publishes the batches.
        namespace: every event of this daemon belongs to it.
    """

    def __init__(self, bus: Publisher, namespace: str) -> None:
        self._bus = bus
        self._ns = namespace
        self._buffers: dict[str, list[InvocationEvent]] = defaultdict(list)
        # Futures of events whose publisher waits for them, per queue, parallel to buffers.
        self._futures: dict[str, list[asyncio.Future[None] | None]] = defaultdict(list)
        # Batches that have their msg id: retried exactly as first sent, or the retry of
        # a publish that was in fact stored would be a "duplicate" with other events in it.
        self._sealed: dict[
            str, deque[tuple[str, EventBatch, list[asyncio.Future[None] | None]]]
        ] = defaultdict(deque)
        self._waiting = asyncio.Event()
        self._full = asyncio.Event()
        # Set when a buffered event must go now: one is awaited, or a buffer is full.
        self._urgent = asyncio.Event()
        # Per process, so batch ids of a restarted daemon never collide with its last run's.
        self._id_prefix = secrets.token_hex(6)
        self._ids = itertools.count()
        self._flush_lock = asyncio.Lock()
        self._retry_s = 0.0
        #: futures of bounded publishes and their deadlines (loop time), oldest first,
        #: watched by one timer (:meth:`_on_deadline`), not one per event
        self._bounded: deque[tuple[float, asyncio.Future[None]]] = deque()
        self._deadline: asyncio.TimerHandle | None = None

    def emit(self, event: InvocationEvent) -> None:
        """Buffer one event; it is published on the flusher's next turn (NATS permitting)."""
        self._add(event, None)

    async def publish(self, event: InvocationEvent, *, within_s: float | None = None) -> None:
        """Buffer one event and return once it is stored in JetStream (batched with the
        others of this moment). A job awaits this before it acks, so that a daemon dying
        between the two never leaves a finished invocation unrecorded.

        Raises:
            TimeoutError: it was not stored within ``within_s`` seconds (``None``: no
                bound); it stays buffered, in order, and goes out when NATS takes it.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._add(event, fut)
        if within_s is not None:
            self._bound(fut, loop.time() + within_s)
        await fut

    def _bound(self, fut: asyncio.Future[None], deadline: float) -> None:
        bounded = self._bounded
        while bounded and bounded[0][1].done():
            bounded.popleft()  # stored (or given up) already: what keeps the deque short
        bounded.append((deadline, fut))
        if self._deadline is not None and deadline < self._deadline.when():
            self._deadline.cancel()  # a shorter bound than the ones before it
            self._deadline = None
        if self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_at(deadline, self._on_deadline)

    def _on_deadline(self) -> None:
        """Fail the bounded publishes past their deadline (their events stay buffered)."""
        self._deadline = None
        now = asyncio.get_running_loop().time()
        kept: deque[tuple[float, asyncio.Future[None]]] = deque()
        for deadline, fut in self._bounded:
            if fut.done():
                continue
            if deadline <= now:
                fut.set_exception(TimeoutError("the event was not stored by its deadline"))
            else:
                kept.append((deadline, fut))
        self._bounded = kept
        if kept:
            first = min(deadline for deadline, _ in kept)
            self._deadline = asyncio.get_running_loop().call_at(first, self._on_deadline)

    def _add(self, event: InvocationEvent, fut: asyncio.Future[None] | None) -> None:
        buf = self._buffers[event.queue]
        buf.append(event)
        self._futures[event.queue].append(fut)
        self._waiting.set()
        if len(buf) >= MAX_BATCH:
            self._full.set()
        if fut is not None or len(buf) >= MAX_BATCH:
            self._urgent.set()

    async def run(self) -> None:
        """Flush loop; runs until cancelled (then call :meth:`flush` once more)."""
        while True:
            await self._waiting.wait()
            # While publishing fails, retry after a pause (sooner for a full buffer); else
            # let events nobody waits for linger a moment for company.
            retrying = bool(self._retry_s)
            pause, until = (self._retry_s, self._full) if retrying else (LINGER_S, self._urgent)
            if not until.is_set():
                try:
                    async with asyncio.timeout(pause):
                        await until.wait()
                except TimeoutError:
                    pass
            if not self._retry_s:
                await asyncio.sleep(0)  # let the jobs that finish together add theirs
            try:
                # Shielded: cancelling the loop must not cut a publish short, or the last
                # flush would send its batch again (deduplicated, but seen twice on the wire).
                await asyncio.shield(self.flush())
            except Exception:
                log.exception("events: flush failed; retrying")
                self._retry_s = MAX_RETRY_S

    async def flush(self) -> bool:
        """Publish everything buffered now.

        Returns:
            Whether the buffers are empty (``False``: NATS refused; the events are kept).
        """
        async with self._flush_lock:
            self._waiting.clear()
            self._full.clear()
            self._urgent.clear()
            for queue in list({**self._sealed, **self._buffers}):
                if not await self._flush_queue(queue):
                    self._waiting.set()
                    self._retry_s = min(MAX_RETRY_S, max(FLUSH_S, self._retry_s * 2))
                    return False
            if self._retry_s:
                log.info("events: publishing again")
                self._retry_s = 0.0
            return True

    async def _flush_queue(self, queue: str) -> bool:
        sealed = self._sealed[queue]
        buf = self._buffers.pop(queue, [])
        futs = self._futures.pop(queue, [])
        for i in range(0, len(buf), MAX_BATCH):
            msg_id = f"{self._id_prefix}-{next(self._ids)}"
            sealed.append(
                (msg_id, EventBatch(events=buf[i : i + MAX_BATCH]), futs[i : i + MAX_BATCH])
            )
        while sealed:
            msg_id, batch, waiting = sealed[0]
            try:
                await self._bus.publish_events(self._ns, queue, batch, msg_id=msg_id)
            except LakeshoreError as e:
                if not self._retry_s:
                    log.warning("events: %s not published yet: %s", queue, e)
                return False
            sealed.popleft()
            for fut in waiting:
                if fut is not None and not fut.done():
                    fut.set_result(None)
        del self._sealed[queue]
        return True

    @property
    def buffered(self) -> int:
        """Events not yet published."""
        sealed = sum(len(b.events) for q in self._sealed.values() for _, b, _ in q)
        return sealed + sum(len(b) for b in self._buffers.values())
