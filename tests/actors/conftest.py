"""Fixtures of the actor protocol tests: a runtime over the in-memory bus and store.

runtime       an actor Runtime, shut down at teardown (every actor stopped)
bus           an InMemoryBus (its ``nudges``, ``controls`` and ``events`` record the sends)
store         an InMemoryStore holding the namespace ``default``
registry      a WorkerRegistry on ``store``
outbox        an Outbox publishing the submits' events on ``bus`` (``await
              published(outbox, bus)`` reads them once it is flushed)
spawn_queue   ``await spawn_queue(name, **row_fields)``: insert a queue row and spawn its
              QueueActor (the directory's job in production)
directory     a QueueDirectory on ``runtime``
backend       a RecordingBackend reporting exits to ``registry``
launcher      a Launcher with ``backend`` for local providers and the real external one
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.directory import DirectoryMsg, QueueDirectory
from lakeshore.actors.launcher import Launcher, LauncherMsg, exit_reporter
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.queue import QueueActor, QueueMsg
from lakeshore.actors.workers import WorkerMsg, WorkerRegistry
from lakeshore.bus.memory import InMemoryBus
from lakeshore.model import DaemonAccess, Namespace, ProviderKind, Queue, Worker, now
from lakeshore.providers import ExternalProvider
from lakeshore.store.memory import InMemoryStore

from .support import NS, WAIT_S, WALL, RecordingBackend, spawn_registry

NATS_URL = "nats://test.invalid:4222"

SpawnQueue = Callable[..., Awaitable[ActorRef[QueueMsg]]]


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    rt = Runtime(ask_timeout_s=WAIT_S)
    try:
        yield rt
    finally:
        await rt.shutdown(timeout_s=WAIT_S)


@pytest.fixture
def bus() -> InMemoryBus:
    return InMemoryBus()


@pytest.fixture
async def store() -> InMemoryStore:
    s = InMemoryStore()
    await s.insert_namespace(Namespace(name=NS, org="default", created_at=now()))
    return s


@pytest.fixture
async def registry(runtime: Runtime, store: InMemoryStore) -> ActorRef[WorkerMsg]:
    return await spawn_registry(runtime, WorkerRegistry(store, lost_after_s=10.0, clock=WALL))


@pytest.fixture
async def outbox(bus: InMemoryBus) -> AsyncIterator[Outbox]:
    box = Outbox(bus)
    try:
        yield box
    finally:
        await box.close()


@pytest.fixture
def spawn_queue(
    runtime: Runtime,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
    outbox: Outbox,
) -> SpawnQueue:
    async def spawn(name: str = "q", **fields: Any) -> ActorRef[QueueMsg]:
        ts = now()
        row = Queue(name=name, namespace=NS, created_at=ts, updated_at=ts, **fields)
        await store.insert_queue(row)
        actor = QueueActor(NS, name, store=store, bus=bus, workers=registry, outbox=outbox)
        return await runtime.spawn(actor)

    return spawn


@pytest.fixture
async def directory(
    runtime: Runtime,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
    outbox: Outbox,
) -> ActorRef[DirectoryMsg]:
    return await runtime.spawn(
        QueueDirectory(runtime, store=store, bus=bus, workers=registry, outbox=outbox)
    )


@pytest.fixture
def backend(registry: ActorRef[WorkerMsg]) -> RecordingBackend:
    return RecordingBackend(exit_reporter(registry))


@pytest.fixture
async def launcher(
    runtime: Runtime,
    store: InMemoryStore,
    registry: ActorRef[WorkerMsg],
    backend: RecordingBackend,
) -> ActorRef[LauncherMsg]:
    backends = {ProviderKind.LOCAL: backend, ProviderKind.EXTERNAL: ExternalProvider()}
    return await runtime.spawn(Launcher(store, registry, backends, access=fake_access))


def fake_access(worker: Worker, org: str) -> DaemonAccess:
    """What the control plane mints for a launched daemon, recognisable in assertions."""
    return DaemonAccess(
        worker_id=worker.id,
        namespace=worker.namespace,
        nats_url=NATS_URL,
        credential=f"credential-of-{worker.id}-in-{org}",
        expires_at=now(),
    )
