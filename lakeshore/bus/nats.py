"""The NATS JetStream bus: connection, queue streams and their durable consumers.

Each queue is a WorkQueue stream with explicit acks; every daemon of the queue pulls from
the same durable consumer per priority level, so each message goes to one daemon at a time.
``max_msgs`` is the queue's ``max_depth`` with ``discard=new``: JetStream itself refuses a
publish to a full queue, and depth counts queued plus in-flight invocations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js import errors as jse
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from lakeshore.bus import subjects
from lakeshore.bus.connection import connect_nats
from lakeshore.errors import Unavailable

log = logging.getLogger(__name__)

#: A retried submit inside this window is deduplicated by its Nats-Msg-Id (seconds).
DUPLICATE_WINDOW_S = 600.0
#: A claim not kept alive with in_progress() for this long is redelivered (seconds).
ACK_WAIT_S = 60.0


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """What JetStream knows of one queue right now (eventually consistent)."""

    #: stored and not yet delivered
    pending: int
    #: delivered and not yet acknowledged
    running: int
    #: every stored message, leftovers included
    depth: int


class NatsBus:
    """The control plane's handle on NATS. Build it with :meth:`connect`."""

    def __init__(self, nc: NatsClient, js: JetStreamContext, replicas: int) -> None:
        self._nc = nc
        self._js = js
        self._replicas = replicas

    @classmethod
    async def connect(cls, url: str, *, replicas: int = 1, name: str = "lakeshore") -> NatsBus:
        """Connect (see :func:`lakeshore.bus.connection.connect_nats`)."""
        nc = await connect_nats(url, name=name)
        return cls(nc, nc.jetstream(timeout=5), replicas)

    @property
    def connected(self) -> bool:
        return self._nc.is_connected

    async def close(self) -> None:
        await self._nc.close()

    async def ensure_queue(
        self, namespace: str, queue: str, *, levels: int, max_depth: int | None
    ) -> None:
        """Create or update the queue's stream and its per-level durable consumers.

        Idempotent: the control plane calls it on every start and on every change of
        admission settings.
        """
        cfg = StreamConfig(
            name=subjects.queue_stream(namespace, queue),
            subjects=[subjects.queue_subjects(namespace, queue)],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            discard=DiscardPolicy.NEW,
            max_msgs=max_depth if max_depth is not None else -1,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=self._replicas,
        )
        async with self._errors(f"ensure the stream of {namespace}/{queue}"):
            try:
                await self._js.stream_info(cfg.name)
                await self._js.update_stream(cfg)
            except jse.NotFoundError:
                await self._js.add_stream(cfg)
            for level in range(levels):
                await self._js.add_consumer(
                    cfg.name,
                    ConsumerConfig(
                        durable_name=subjects.level_consumer(level),
                        filter_subject=subjects.level_subject(namespace, queue, level),
                        ack_policy=AckPolicy.EXPLICIT,
                        ack_wait=ACK_WAIT_S,
                        max_ack_pending=10_000,
                        num_replicas=self._replicas,
                    ),
                )

    async def delete_queue(self, namespace: str, queue: str) -> None:
        """Delete the queue's stream (and with it every pending invocation)."""
        async with self._errors(f"delete the stream of {namespace}/{queue}"):
            try:
                await self._js.delete_stream(subjects.queue_stream(namespace, queue))
            except jse.NotFoundError:
                pass

    async def queue_exists(self, namespace: str, queue: str) -> bool:
        async with self._errors(f"read the stream of {namespace}/{queue}"):
            try:
                await self._js.stream_info(subjects.queue_stream(namespace, queue))
            except jse.NotFoundError:
                return False
            return True

    async def queue_counts(self, namespace: str, queue: str, *, levels: int) -> QueueCounts:
        stream = subjects.queue_stream(namespace, queue)
        pending = running = 0
        async with self._errors(f"read the counts of {namespace}/{queue}"):
            try:
                si = await self._js.stream_info(stream)
                for level in range(levels):
                    ci = await self._js.consumer_info(stream, subjects.level_consumer(level))
                    pending += ci.num_pending or 0
                    running += ci.num_ack_pending or 0
            except jse.NotFoundError:
                return QueueCounts(0, 0, 0)
        return QueueCounts(pending=pending, running=running, depth=si.state.messages)

    def _errors(self, what: str) -> _NatsErrors:
        return _NatsErrors(what)


class _NatsErrors:
    """Turns NATS failures into :class:`Unavailable` with what was being done."""

    def __init__(self, what: str) -> None:
        self._what = what

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        if exc is None or isinstance(exc, jse.NotFoundError):
            return False
        if isinstance(exc, (nats.errors.Error, jse.Error, TimeoutError, OSError)):
            raise Unavailable(f"NATS did not answer while trying to {self._what}: {exc}") from exc
        return False
