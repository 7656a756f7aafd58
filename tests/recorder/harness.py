"""Helpers of the Recorder tests: a publisher of event batches and Recorders over one store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import nats
from nats.js import errors as jse

from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.recorder import Recorder, RecorderMsg, WaitFinished, WaitRecorded
from lakeshore.bus import codec, subjects
from lakeshore.bus.events import EventFeed
from lakeshore.model import EventBatch, EventType, InvocationEvent, InvocationState
from lakeshore.store import Store

NS, QUEUE = "rec", "jobs"
#: Every wait of these tests is bounded by this (seconds).
WAIT_S = 10.0


def event(
    inv: str, type_: EventType, epoch: int | None = None, *, ns: str = NS, queue: str = QUEUE,
    ts: datetime | None = None, detail: dict[str, Any] | None = None,
) -> InvocationEvent:  # fmt: skip
    return InvocationEvent(
        namespace=ns, queue=queue, invocation_id=inv, ts=ts or datetime.now(UTC), type=type_,
        attempt=epoch or 0, epoch=epoch, worker=None if epoch is None else f"w-{epoch}",
        detail=detail,
    )  # fmt: skip


class Harness:
    """Publishes event batches as producers do and runs Recorders over one store."""

    def __init__(self, nc: nats.NATS, store: Store) -> None:
        self.nc, self.js, self.store = nc, nc.jetstream(), store
        self.runtime = Runtime(ask_timeout_s=WAIT_S)
        self.ref: ActorRef[RecorderMsg] | None = None

    async def start(self, feed: EventFeed | None = None, **options: Any) -> ActorRef[RecorderMsg]:
        await self.stop()
        recorder = Recorder(self.store, feed or EventFeed(self.nc), **options)
        self.ref = await self.runtime.spawn(recorder)
        return self.ref

    async def stop(self) -> None:
        if self.ref is not None:
            await self.runtime.stop(self.ref)
            self.ref = None

    async def publish(self, *events: InvocationEvent, ns: str = NS, queue: str = QUEUE) -> int:
        """Publish one EventBatch; returns its LS_EVENTS sequence."""
        return await self.publish_raw(codec.encode(EventBatch(events=list(events))), ns, queue)

    async def publish_raw(self, data: bytes, ns: str = NS, queue: str = QUEUE) -> int:
        ack = await self.js.publish(subjects.event_subject(ns, queue), data)
        return ack.seq

    async def recorded(self, seq: int) -> None:
        """Wait until the running Recorder has recorded message ``seq``."""
        assert self.ref is not None
        async with asyncio.timeout(WAIT_S):
            await (await self.ref.ask(WaitRecorded(seq)))

    async def finished(self, inv: str, ns: str = NS) -> InvocationState:
        assert self.ref is not None
        async with asyncio.timeout(WAIT_S):
            return (await (await self.ref.ask(WaitFinished(ns, inv)))).state

    async def types(self, inv: str, ns: str = NS) -> list[str]:
        return [row[4] for row in await self.store.list_invocation_events(ns, inv)]


async def delete_events_stream(js: Any) -> None:
    try:
        await js.delete_stream(subjects.EVENTS_STREAM)
    except jse.NotFoundError:
        pass
