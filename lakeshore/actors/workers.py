"""WorkerRegistry: the one owner of worker rows — registration and queue membership.

``Worker.queues`` is the source of truth of membership; the empty array is the default
queue. The explicit add/remove edits reject ``default`` (the empty array is the contract),
while the membership lookup also accepts a literal ``default`` entry.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import msgspec
from msgspec import Struct

from lakeshore.actors.base import Actor
from lakeshore.errors import Invalid, QueueNotFound, WorkerNotFound
from lakeshore.model import (
    DEFAULT_QUEUE,
    Worker,
    WorkerRegister,
    WorkerStatus,
    now,
    validate_name,
)
from lakeshore.store import Store

log = logging.getLogger(__name__)


class Register(Struct, frozen=True):
    worker: WorkerRegister


class EditQueues(Struct, frozen=True):
    namespace: str
    ref: str
    add: list[str]
    remove: list[str]
    actor: str | None


class Scrub(Struct, frozen=True):
    """Remove a queue from every ``Worker.queues`` (or, dry run, list its members)."""

    namespace: str
    queue: str
    dry_run: bool = False


WorkerMsg = Register | EditQueues | Scrub


def serves(worker: Worker, queue: str) -> bool:
    """Whether ``worker`` pulls from ``queue`` by its membership array."""
    if queue == DEFAULT_QUEUE:
        return not worker.queues or DEFAULT_QUEUE in worker.queues
    return queue in worker.queues


def is_member(worker: Worker, queue: str) -> bool:
    """A member pulls from the queue and has not stopped (lost workers may come back)."""
    return worker.status is not WorkerStatus.STOPPED and serves(worker, queue)


class WorkerRegistry(Actor[WorkerMsg]):
    name = "worker-registry"

    def __init__(self, store: Store) -> None:
        self._store = store

    async def handle(self, msg: WorkerMsg) -> Any:
        match msg:
            case Register(worker=w):
                return await self._register(w)
            case EditQueues():
                return await self._edit(msg)
            case Scrub(namespace=ns, queue=queue, dry_run=True):
                return [w for w in await self._store.list_workers(ns) if is_member(w, queue)]
            case Scrub(namespace=ns, queue=queue):
                scrubbed = await self._store.scrub_queue_from_workers(ns, queue)
                if scrubbed:
                    log.info("scrubbed %s/%s from %d worker(s)", ns, queue, len(scrubbed))
                return scrubbed

    async def _register(self, reg: WorkerRegister) -> Worker:
        validate_name("worker", reg.name)
        for q in reg.queues:
            validate_name("queue", q)
        existing = await self._store.get_worker(reg.namespace, reg.id or reg.name)
        worker = Worker(
            id=reg.id or (existing.id if existing else new_worker_id()),
            name=reg.name,
            namespace=reg.namespace,
            queues=_unique(reg.queues),
            labels=reg.labels,
            provider=reg.provider,
            managed=reg.managed,
            status=WorkerStatus.IDLE,
            last_heartbeat=now(),
            started_at=now(),
        )
        await self._store.upsert_worker(worker)
        log.info("worker %s (%s) registered in %s", worker.name, worker.id, worker.namespace)
        return worker

    async def _edit(self, msg: EditQueues) -> Worker:
        for q in [*msg.add, *msg.remove]:
            if q == DEFAULT_QUEUE:
                raise Invalid(
                    "'default' cannot be added or removed explicitly: the default queue is "
                    "the empty array — remove every other queue to pull from it"
                )
            validate_name("queue", q)
        worker = await self._store.get_worker(msg.namespace, msg.ref)
        if worker is None:
            raise WorkerNotFound(msg.namespace, msg.ref)
        for q in msg.add:
            if await self._store.get_queue(msg.namespace, q) is None:
                raise QueueNotFound(msg.namespace, q)
        queues = [q for q in worker.queues if q not in msg.remove]
        queues = _unique([*queues, *msg.add])
        if queues == worker.queues:
            return worker
        new = msgspec.structs.replace(worker, queues=queues)
        await self._store.upsert_worker(new)
        for q in msg.add:
            if q not in worker.queues:
                await self._record(new, q, "member_added", msg.actor)
        for q in msg.remove:
            if q in worker.queues:
                await self._record(new, q, "member_removed", msg.actor)
        return new

    async def _record(self, w: Worker, queue: str, event: str, actor: str | None) -> None:
        await self._store.append_queue_event(
            w.namespace, queue, event, actor, {"worker": w.id, "name": w.name, "queues": w.queues}
        )


def new_worker_id() -> str:
    return "w-" + secrets.token_hex(6)


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))
