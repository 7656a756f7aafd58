"""Helpers of the actor tests: builders, a recording provider backend and fault injection.

Everything here runs against the in-memory ports (``InMemoryBus``, ``InMemoryStore``); no
test of this directory starts a nats-server, a DuckDB file or a process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.workers import WorkerMsg, WorkerRegistry
from lakeshore.bus import codec
from lakeshore.bus.memory import InMemoryBus
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    DaemonAccess,
    EventType,
    Invocation,
    InvocationEvent,
    InvocationSubmit,
    Provider,
    QueueEvent,
    Worker,
    now,
)
from lakeshore.providers import ExitCallback
from lakeshore.providers.base import AccessFor
from lakeshore.store.memory import InMemoryStore

T = TypeVar("T")

NS = "default"
#: Bound of every wait in these tests (seconds); none should come near it.
WAIT_S = 5.0


async def settle(awaitable: Awaitable[T], timeout_s: float = WAIT_S) -> T:
    """Await a future (a Submit's answer, a Recorder's wait), bounded."""
    async with asyncio.timeout(timeout_s):
        return await awaitable


def call(n: int = 0, **fields: Any) -> InvocationSubmit:
    """One function invocation to submit."""
    return InvocationSubmit(fn="jobs:work", args=[n], **fields)


class Wall:
    """A wall clock that tests can set back: ``WALL.at(-60)`` is "60 s ago" until ``reset``."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> datetime:
        return now() + timedelta(seconds=self.offset_s)


#: The registry's clock in these tests (a heartbeat's time is the registry's, not the
#: daemon's, so a test sets the clock back to send a beat "in the past").
WALL = Wall()


async def spawn_registry(runtime: Runtime, registry: WorkerRegistry) -> ActorRef[WorkerMsg]:
    """Spawn ``registry`` (its clock :data:`WALL`) as if it had started an hour ago: a
    registry counts a worker's silence from its own start at the earliest, and the tests
    send heartbeats "in the past" within that hour."""
    WALL.offset_s = -3600.0
    try:
        return await runtime.spawn(registry)
    finally:
        WALL.offset_s = 0.0


def ago(seconds: float) -> datetime:
    return now() - timedelta(seconds=seconds)


def event(
    inv: str, type_: EventType, epoch: int | None = None, *, queue: str = "q", ns: str = NS
) -> InvocationEvent:
    """A lifecycle event as a daemon (``epoch`` given) or the control plane publishes it."""
    return InvocationEvent(
        namespace=ns,
        queue=queue,
        invocation_id=inv,
        ts=now(),
        type=type_,
        attempt=epoch or 0,
        epoch=epoch,
        worker=None if epoch is None else f"w-{epoch}",
    )


async def published(
    outbox: Outbox, bus: InMemoryBus, type_: EventType | None = None
) -> list[InvocationEvent]:
    """Every invocation event published on the bus once ``outbox`` has published what was put
    in it, in order (of one type if given)."""
    await settle(outbox.flushed())
    return [
        ev for _, _, batch in bus.events for ev in batch.events if type_ is None or ev.type is type_
    ]


def stored_ids(bus: InMemoryBus, queue: str, level: int = 0, ns: str = NS) -> list[str]:
    """The ids of the invocations stored in a queue's stream, oldest first (claims them
    all, as a daemon would: use it last)."""
    return [codec.decode(p, Invocation).id for _, p in bus.claim(ns, queue, level, 10_000)]


async def queue_events(
    store: InMemoryStore, queue: str, type_: str | None = None, ns: str = NS
) -> list[QueueEvent]:
    """A queue's events, oldest first, with their detail (of one type if given)."""
    rows = await store.list_queue_events(ns, queue, limit=10_000, verbose=True)
    return [e for e in reversed(rows) if type_ is None or e.type == type_]


def fail_once(obj: object, method: str, error: BaseException) -> None:
    """Make the next call of ``obj.method`` (async) raise ``error``; later calls work."""
    assert callable(getattr(obj, method))

    async def failing(*args: Any, **kwargs: Any) -> Any:
        delattr(obj, method)  # the instance attribute goes: the class's method is back
        raise error

    setattr(obj, method, failing)


class RecordingBackend:
    """A provider backend (the ``Backend`` protocol) that starts nothing: it records each
    launch and stop, and reports exits through the exit callback as a real one does.

    Args:
        on_exit: the exit callback (``lakeshore.actors.launcher.exit_reporter``).
        refuse: raised by ``check_launch`` (a provider that cannot launch).
    """

    def __init__(self, on_exit: ExitCallback, refuse: LakeshoreError | None = None) -> None:
        self._on_exit = on_exit
        self.refuse = refuse
        self.checked: list[str] = []
        self.launches: list[list[Worker]] = []
        #: the NATS access each launched daemon was handed, by worker id
        self.access: dict[str, DaemonAccess] = {}
        self.running: dict[str, Worker] = {}
        self.stops: list[str] = []
        self.closed = False

    @property
    def launched(self) -> list[Worker]:
        return [w for batch in self.launches for w in batch]

    def check_config(self, config: dict[str, Any]) -> None:
        return None

    def check_launch(
        self, provider: Provider, *, names: Sequence[str] = (), queues: Sequence[str] = ()
    ) -> None:
        self.checked.append(provider.name)
        if self.refuse is not None:
            raise self.refuse

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        self.launches.append(list(workers))
        self.access.update((w.id, access(w)) for w in workers)
        self.running.update((w.id, w) for w in workers)

    def daemons(self) -> list[Worker]:
        return list(self.running.values())

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        if self.running.pop(worker.id, None) is None:
            return False
        self.stops.append(worker.id)
        self._on_exit(worker, -15, "stopped on request", True)
        return True

    def exit(self, worker_id: str, returncode: int | None, reason: str) -> None:
        """The process of ``worker_id`` ended by itself."""
        self._on_exit(self.running.pop(worker_id), returncode, reason, False)

    async def close(self) -> None:
        for worker in list(self.running.values()):
            self.running.pop(worker.id)
            self.stops.append(worker.id)
            self._on_exit(worker, -15, "stopped on request", True)
        self.closed = True
