"""The controller's I/O: reading the backlog a tick decides from, applying its decisions.

The rule book (:mod:`lakeshore.controller`) is pure; the ControllerActor uses this module
to feed it and to act on what it returns, always through the owners of the state touched:

* a launch asks the Launcher (which has the WorkerRegistry make the rows, then starts the
  daemons on the queue's provider), marked ``managed``;
* a retirement asks the WorkerRegistry (status ``retiring``; the next heartbeat reply
  says ``retire``) — the daemon finishes its current invocation, then exits, so no busy
  daemon is ever killed;
* a lost daemon is marked by the WorkerRegistry, which judges it again by its own clock;
* steal leases reach the daemons through the WorkerRegistry's heartbeat replies.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec

from lakeshore.actors.base import ActorRef
from lakeshore.actors.launcher import LaunchDaemons
from lakeshore.actors.workers import MarkWorkerLost, RetireWorker, SetLeases
from lakeshore.bus import codec
from lakeshore.bus.port import Bus
from lakeshore.controller.decisions import Launch, MarkLost, Retire
from lakeshore.controller.records import Record, lost_detail
from lakeshore.controller.snapshot import QueueKey, QueueLoad
from lakeshore.model import DaemonLaunch, Invocation, Queue, StealGrant, Worker, levels_of
from lakeshore.store.port import QueueEventLog

#: Queues whose backlog is read at the same time (each read is a few NATS requests).
READ_CONCURRENCY = 64
#: Longest part of a queue or pool name in a daemon's name (``<stem>-<6 hex>[-NN]`` ≤ 63).
_STEM_CHARS = 50


async def read_loads(bus: Bus, queues: Iterable[Queue], now: datetime) -> dict[QueueKey, QueueLoad]:
    """The backlog of each queue, from JetStream: pending, running, oldest pending age.

    The age is ``now`` minus the oldest undelivered invocation's ``submitted_at``.

    Raises:
        Unavailable: NATS did not answer for some queue (the tick is skipped).
    """
    gate = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(q: Queue) -> QueueLoad:
        levels = levels_of(q.kind)
        async with gate:
            counts = await bus.queue_counts(q.namespace, q.name, levels=levels)
            oldest = None
            if counts.pending:
                oldest = await bus.oldest_pending(q.namespace, q.name, levels=levels)
        return QueueLoad(
            namespace=q.namespace,
            queue=q.name,
            pending=counts.pending,
            running=counts.running,
            oldest_pending_age_s=None if oldest is None else _age_s(oldest[1], now),
        )

    loads = await asyncio.gather(*(one(q) for q in queues))
    return {(load.namespace, load.queue): load for load in loads}


def _age_s(payload: bytes, now: datetime) -> float | None:
    try:
        submitted = codec.decode(payload, Invocation).submitted_at
    except msgspec.DecodeError:
        # Unreadable: its first claim terminates it; it does not make the queue look old.
        return None
    return max(0.0, (now - submitted).total_seconds())


class Applier:
    """Applies decisions through the actors that own the state.

    Args:
        store: the row store (queue events are appended here).
        workers: the WorkerRegistry.
        launcher: the Launcher.
    """

    def __init__(
        self, *, store: QueueEventLog, workers: ActorRef[Any], launcher: ActorRef[Any]
    ) -> None:
        self._store, self._workers, self._launcher = store, workers, launcher

    async def launch(self, d: Launch) -> list[Worker]:
        """Launch ``d.count`` managed daemons named ``<queue or pool>-<6 hex>[-NN]``.

        Returns:
            Their rows (status ``starting``).

        Raises:
            LakeshoreError: the Launcher's refusal (unknown or external provider, …).
        """
        stem = f"{(d.pool or d.queue)[:_STEM_CHARS].rstrip('-')}-{secrets.token_hex(3)}"
        request = DaemonLaunch(
            provider=d.provider, queues=d.queues, count=d.count, name=stem, labels=d.labels
        )
        launched = await self._launcher.ask(LaunchDaemons(d.namespace, request, managed=True))
        return launched.workers

    async def retire(self, d: Retire) -> Worker:
        """Have the daemon finish its current invocation, then exit.

        The registry marks it ``retiring`` and says ``retire`` in its next heartbeat
        reply (within ``heartbeat_s``). The order is not also sent on the daemon's control
        subject, as ``DELETE /workers/:id`` does: a daemon that gets the order there while
        a heartbeat is in flight can miss the cancellation of its heartbeat loop
        (``asyncio.wait_for`` on Python 3.11) and never exit — an order in the reply is
        applied by the heartbeat loop itself, so it cannot race it.

        Raises:
            LakeshoreError: the registry does not know the worker, or did not answer.
        """
        return await self._workers.ask(RetireWorker(d.namespace, d.worker_id))

    async def mark_lost(self, d: MarkLost) -> Worker | None:
        """Have the registry mark the worker lost; ``None`` if it was not (or no longer) due."""
        return await self._workers.ask(MarkWorkerLost(d.namespace, d.worker_id, lost_detail(d)))

    async def set_leases(self, grants: dict[str, list[StealGrant]]) -> None:
        """Replace the leases the registry delivers in heartbeat replies."""
        await self._workers.ask(SetLeases(grants))

    async def record(self, records: Iterable[Record]) -> None:
        """Append the records as queue events (system actor)."""
        for r in records:
            await self._store.append_queue_event(r.namespace, r.queue, r.type, None, r.detail)
