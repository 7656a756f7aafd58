"""Batched publisher of lifecycle events, one buffer per queue.

Events are flushed at least every :data:`FLUSH_S` and as soon as :data:`MAX_BATCH` are
waiting for one queue, so a busy daemon sends few large batches and an idle one reports
within 20 ms. Each batch carries a ``Nats-Msg-Id``, so a retried publish (the first may
have been stored although its answer was lost) is deduplicated by JetStream. A batch that
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

#: Longest time an event waits in the buffer while NATS is healthy (seconds).
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
        # Batches that have their msg id: retried exactly as first sent, or the retry of
        # a publish that was in fact stored would be a "duplicate" with other events in it.
        self._sealed: dict[str, deque[tuple[str, EventBatch]]] = defaultdict(deque)
        self._waiting = asyncio.Event()
        self._full = asyncio.Event()
        # Per process, so batch ids of a restarted daemon never collide with its last run's.
        self._id_prefix = secrets.token_hex(6)
        self._ids = itertools.count()
        self._flush_lock = asyncio.Lock()
        self._retry_s = 0.0

    def emit(self, event: InvocationEvent) -> None:
        """Buffer one event; it is published within :data:`FLUSH_S` (NATS permitting)."""
        buf = self._buffers[event.queue]
        buf.append(event)
        self._waiting.set()
        if len(buf) >= MAX_BATCH:
            self._full.set()

    async def run(self) -> None:
        """Flush loop; runs until cancelled (then call :meth:`flush` once more)."""
        while True:
            await self._waiting.wait()
            try:
                async with asyncio.timeout(FLUSH_S + self._retry_s):
                    await self._full.wait()
            except TimeoutError:
                pass
            try:
                await self.flush()
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
        for i in range(0, len(buf), MAX_BATCH):
            msg_id = f"{self._id_prefix}-{next(self._ids)}"
            sealed.append((msg_id, EventBatch(events=buf[i : i + MAX_BATCH])))
        while sealed:
            msg_id, batch = sealed[0]
            try:
                await self._bus.publish_events(self._ns, queue, batch, msg_id=msg_id)
            except LakeshoreError as e:
                if not self._retry_s:
                    log.warning("events: %s not published yet: %s", queue, e)
                return False
            sealed.popleft()
        del self._sealed[queue]
        return True

    @property
    def buffered(self) -> int:
        """Events not yet published."""
        sealed = sum(len(b.events) for q in self._sealed.values() for _, b in q)
        return sealed + sum(len(b) for b in self._buffers.values())
