"""QueueDirectory: owns the set of queues — which exist, creating them, removing them.

It spawns one :class:`~lakeshore.actors.queue.QueueActor` per queue (rebuilt from the store
at start) and materialises a namespace's ``default`` queue on first use. Everything about
one existing queue is then asked of that queue's actor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from msgspec import Struct

from lakeshore import elasticity, quotas
from lakeshore.actors.base import Actor, ActorRef, Runtime
from lakeshore.actors.idempotency import DEFAULT_KEY_TTL_S
from lakeshore.actors.intake import NO_FAULTS
from lakeshore.actors.outbox import Outbox
from lakeshore.actors.queue import (
    DeleteQueue,
    QueueActor,
    QueueMsg,
    check_provider,
    row_dict,
)
from lakeshore.bus.port import Bus
from lakeshore.errors import AlreadyExists, QueueNotFound, ReservedName
from lakeshore.faults import Faults
from lakeshore.model import (
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_DESCRIPTION,
    Queue,
    QueueCreate,
    QueueKind,
    now,
    validate_name,
)
from lakeshore.quotas import DEFAULT_QUOTAS, Quotas
from lakeshore.store.port import QueueStore

log = logging.getLogger(__name__)

#: Queue actors started at the same time when the directory (re)builds them.
START_CONCURRENCY = 32


class CreateQueue(Struct, frozen=True):
    namespace: str
    body: QueueCreate
    actor: str | None


class EnsureDefault(Struct, frozen=True):
    namespace: str


class Lookup(Struct, frozen=True):
    namespace: str
    name: str


class RemoveQueue(Struct, frozen=True):
    namespace: str
    name: str
    force: bool
    actor: str | None


DirectoryMsg = CreateQueue | EnsureDefault | Lookup | RemoveQueue


class QueueDirectory(Actor[DirectoryMsg]):
    name = "queue-directory"

    def __init__(
        self,
        runtime: Runtime,
        *,
        store: QueueStore,
        bus: Bus,
        workers: ActorRef[Any],
        outbox: Outbox,
        key_ttl_s: float = DEFAULT_KEY_TTL_S,
        faults: Faults = NO_FAULTS,
        on_created: Callable[[str], None] = lambda namespace: None,
        quotas: Quotas = DEFAULT_QUOTAS,
    ) -> None:
        self._runtime, self._store, self._bus, self._workers = runtime, store, bus, workers
        self._outbox = outbox
        self._key_ttl_s, self._faults, self._quotas = key_ttl_s, faults, quotas
        # Told the namespace of each new queue (its daemons are granted its stream).
        self._on_created = on_created
        self._queues: dict[tuple[str, str], ActorRef[QueueMsg]] = {}
        #: every queue row, its actor started or not (``queues_per_namespace`` counts them)
        self._rows: set[tuple[str, str]] = set()

    async def started(self) -> None:
        # A restart reconciles with the store rather than respawning every queue: the
        # other queues' actors (and the submits waiting in them) are not this failure's.
        expired = now() - timedelta(seconds=self._key_ttl_s)
        pruned = await self._store.prune_keys(expired)
        if pruned:
            log.info("forgot %d idempotency key(s) older than %s", pruned, expired)
        stored = {(q.namespace, q.name): q for q in await self._store.all_queues()}
        self._rows = set(stored)
        for key in [k for k in self._queues if k not in stored]:
            await self._runtime.stop(self._queues.pop(key))
        # Each start ensures its stream (a few NATS round trips): started side by side, a
        # bounded number at a time, a restart with thousands of queues is ready in seconds.
        gate = asyncio.Semaphore(START_CONCURRENCY)

        async def start(row: Queue) -> None:
            async with gate:
                await self._spawn_logged(row.namespace, row.name, row)

        missing = sorted(stored.keys() - self._queues.keys())
        await asyncio.gather(*(start(stored[key]) for key in missing))
        log.info("queue directory rebuilt: %d queue(s)", len(self._queues))

    async def stopped(self) -> None:
        for ref in self._queues.values():
            await self._runtime.stop(ref)

    async def handle(self, msg: DirectoryMsg) -> Any:
        match msg:
            case CreateQueue(namespace=ns, body=body, actor=actor):
                return await self._create(ns, body, actor)
            case EnsureDefault(namespace=ns):
                await self._lookup(ns, DEFAULT_QUEUE)
                return None
            case Lookup(namespace=ns, name=name):
                return await self._lookup(ns, name)
            case RemoveQueue(namespace=ns, name=name, force=force, actor=actor):
                ref = await self._lookup(ns, name)
                scrubbed = await ref.ask(DeleteQueue(force, actor))
                del self._queues[(ns, name)]
                self._rows.discard((ns, name))
                await self._runtime.stop(ref)
                return scrubbed

    async def _lookup(self, ns: str, name: str) -> ActorRef[QueueMsg]:
        """The queue's actor; one whose row exists but whose actor could not be started
        (NATS was down) is started now.

        Raises:
            QueueNotFound: no such queue.
        """
        ref = self._queues.get((ns, name))
        if ref is not None:
            return ref
        if await self._store.get_queue(ns, name) is not None:
            self._rows.add((ns, name))
            await self._spawn(ns, name)
        elif name == DEFAULT_QUEUE:
            await self._materialise_default(ns)
        else:
            raise QueueNotFound(ns, name)
        return self._queues[(ns, name)]

    async def _spawn_logged(self, ns: str, name: str, row: Queue | None = None) -> None:
        try:
            await self._spawn(ns, name, row)
        except Exception as e:
            # Started again on its first lookup; the other queues must not wait for it.
            log.warning("queue %s/%s not started (retried on first use): %s", ns, name, e)

    async def _create(self, ns: str, body: QueueCreate, actor: str | None) -> Queue:
        validate_name("queue", body.name)
        if body.name == DEFAULT_QUEUE:
            raise ReservedName(body.name, "created (every namespace has it already)")
        if (ns, body.name) in self._queues:
            raise AlreadyExists("queue", body.name, f" in namespace {ns!r}")
        scaling = elasticity.build(body.elasticity or {})
        quotas.check_elasticity(self._quotas, scaling)
        await check_provider(self._store, ns, scaling)
        others = sum(1 for n, q in self._rows if n == ns and q != DEFAULT_QUEUE)
        quotas.check_queues(self._quotas, ns, others)
        ts = now()
        row = Queue(
            name=body.name,
            namespace=ns,
            kind=body.kind,
            description=body.description,
            max_depth=body.max_depth,
            on_full=body.on_full,
            elasticity=scaling,
            created_at=ts,
            updated_at=ts,
            labels=dict(body.labels),
            code=body.code,
            defaults=body.defaults,
        )
        return await self._add(row, actor)

    async def _materialise_default(self, ns: str) -> None:
        ts = now()
        row = Queue(
            name=DEFAULT_QUEUE,
            namespace=ns,
            kind=QueueKind.FIFO,
            description=DEFAULT_QUEUE_DESCRIPTION,
            created_at=ts,
            updated_at=ts,
        )
        await self._add(row, None)

    async def _add(self, row: Queue, actor: str | None) -> Queue:
        await self._store.insert_queue(row)
        try:
            await self._spawn(row.namespace, row.name)
        except BaseException:
            # The stream could not be made: leave no row behind (no half-applied create).
            await self._store.delete_queue(row.namespace, row.name)
            raise
        self._rows.add((row.namespace, row.name))
        await self._store.append_queue_event(
            row.namespace, row.name, "created", actor, {"after": row_dict(row)}
        )
        log.info("queue %s/%s created", row.namespace, row.name)
        self._on_created(row.namespace)
        return row

    async def _spawn(self, ns: str, name: str, row: Queue | None = None) -> None:
        actor = QueueActor(
            ns, name, store=self._store, bus=self._bus, workers=self._workers,
            outbox=self._outbox, key_ttl_s=self._key_ttl_s, faults=self._faults,
            quotas=self._quotas, row=row,
        )  # fmt: skip
        self._queues[(ns, name)] = await self._runtime.spawn(actor)
