"""QueueService: the queue routes' workflow — create, list, show, patch, lifecycle, stats.

Every change is the queue's actor's (or, for which queues exist, the directory's); this
service asks them and assembles what the front doors answer (a row with its members, the
stats from JetStream counts and recorded history).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import msgspec

from lakeshore.actors.base import ActorRef
from lakeshore.actors.directory import CreateQueue, EnsureDefault, Lookup, RemoveQueue
from lakeshore.actors.queue import CountWaiting, GetQueue, PatchQueue, Transition
from lakeshore.actors.workers import Members
from lakeshore.bus.port import Bus, QueueCounts
from lakeshore.errors import NamespaceNotFound
from lakeshore.model import (
    DEFAULT_QUEUE,
    Member,
    Namespace,
    Queue,
    QueueCreate,
    QueueDefaults,
    QueueDetail,
    QueueEvent,
    QueuePatch,
    QueueState,
    QueueStats,
    WorkerStatus,
    check_resources,
    levels_of,
    now,
)
from lakeshore.services.code import CodeService
from lakeshore.services.code import require as require_code
from lakeshore.store import Store
from lakeshore.store.port import QueueActivity

#: Waits (briefly) until the history holds what this plane answered
#: (:meth:`lakeshore.services.jobs.JobService.settled`).
Settled = Callable[[], Awaitable[None]]

#: Stats count submissions, outcomes and waits over this recent window (spec/api.md).
STATS_WINDOW = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class Removed:
    queue: str
    namespace: str
    #: names of the workers the queue was scrubbed from (``force``)
    scrubbed: list[str]


class QueueService:
    """Args:
    store: the queue, namespace, event and history queries.
    bus: the queues' JetStream counts.
    directory, workers: the actors asked.
    """

    def __init__(
        self,
        *,
        store: Store,
        bus: Bus,
        directory: ActorRef[Any],
        workers: ActorRef[Any],
        settled: Settled,
        code: CodeService | None = None,
    ) -> None:
        self._store, self._bus = store, bus
        self._directory, self._workers = directory, workers
        self._settled, self._code = settled, code

    async def create(self, namespace: str, body: QueueCreate, actor: str | None) -> Queue:
        _check_defaults(body.defaults)
        await self._check_code(namespace, body.code)
        return await self._directory.ask(CreateQueue(namespace, body, actor))

    async def _check_code(self, namespace: str, digest: str | None) -> None:
        """A queue's code must be stored in its org first (as an invocation's must).

        Raises:
            SnapshotNotFound: it is not.
        """
        if digest is None:
            return
        ns = await self._store.get_namespace(namespace)
        if ns is None:
            raise NamespaceNotFound(namespace)
        await require_code(self._code, ns.org, {digest})

    async def list(
        self,
        ns: Namespace,
        state: QueueState | None,
        *,
        limit: int | None = None,
        after: tuple[str, str] | None = None,
    ) -> list[Queue]:
        """The queues of every namespace of ``ns``'s org (``ns``'s default materialised),
        by namespace then name.

        Args:
            limit: at most this many (``None``: all).
            after: only those after this ``(namespace, name)`` (a page's last row).
        """
        await self._directory.ask(EnsureDefault(ns.name))
        siblings = [n.name for n in await self._store.list_namespaces(ns.org)]
        return await self._store.list_queues(siblings, state, limit=limit, after=after)

    async def get(self, namespace: str, name: str) -> Queue:
        return await (await self._queue(namespace, name)).ask(GetQueue())

    async def show(self, namespace: str, name: str) -> QueueDetail:
        """The row with the workers pulling from it now."""
        row = await self.get(namespace, name)
        members = await self._workers.ask(Members(namespace, row.name))
        return QueueDetail(
            **msgspec.structs.asdict(row),
            members=[
                Member(
                    id=w.id,
                    name=w.name,
                    status=w.status,
                    queues=w.queues,
                    current=w.current,
                    last_heartbeat=w.last_heartbeat,
                )
                for w in members
            ],
        )

    async def patch(self, namespace: str, name: str, patch: QueuePatch, actor: str | None) -> Queue:
        if isinstance(patch.defaults, QueueDefaults):
            _check_defaults(patch.defaults)
        if isinstance(patch.code, str):
            await self._check_code(namespace, patch.code)
        return await (await self._queue(namespace, name)).ask(PatchQueue(patch, actor))

    async def transition(
        self,
        namespace: str,
        name: str,
        verb: Literal["drain", "archive", "unarchive"],
        actor: str | None,
    ) -> Queue:
        return await (await self._queue(namespace, name)).ask(Transition(verb, actor))

    async def remove(self, namespace: str, name: str, force: bool, actor: str | None) -> Removed:
        """Hard delete; ``force`` scrubs the queue out of every worker first.

        Raises:
            QueueHasMembers: it has members and ``force`` is false.
        """
        scrubbed = await self._directory.ask(RemoveQueue(namespace, name, force, actor))
        return Removed(name, namespace, [w.name for w in scrubbed])

    async def events(
        self, namespace: str, name: str, *, limit: int, verbose: bool
    ) -> list[QueueEvent]:
        """The queue's events, newest first: only the current queue's (since its row was
        created), so a queue that was removed and created again does not show the history
        of the removed one. The default queue's are all its own: it is never removed, and
        its row is materialised lazily, after events of its members may have been logged."""
        row = await self.get(namespace, name)
        since = None if row.name == DEFAULT_QUEUE else row.created_at
        return await self._store.list_queue_events(
            namespace, row.name, limit=limit, verbose=verbose, since=since
        )

    async def stats(self, namespace: str, name: str) -> QueueStats:
        """Daemons and utilisation now, the backlog from JetStream, the recent history."""
        ref = await self._queue(namespace, name)
        row = await ref.ask(GetQueue())
        waiting = await ref.ask(CountWaiting())
        # The members before the counts: a daemon that finishes in between is still busy
        # by its last heartbeat, and the counts then bound it (:func:`_stats`).
        members = await self._workers.ask(Members(namespace, row.name))
        live = [w for w in members if w.status is not WorkerStatus.LOST]
        busy = sum(1 for w in live if w.status is WorkerStatus.BUSY)
        counts = await self._bus.queue_counts(namespace, row.name, levels=levels_of(row.kind))
        at = now()
        await self._settled()
        # A stream that holds nothing has nothing pending to age: the history's search for
        # the oldest pending invocation (an aggregate over the queue's unfinished ones) is
        # skipped, as the counts above come from JetStream too.
        recent = await self._store.queue_activity(
            namespace, row.name, at - STATS_WINDOW, unfinished=counts.depth > 0
        )
        return _stats(row, len(live), busy, counts, recent, at, waiting)

    async def _queue(self, namespace: str, name: str) -> ActorRef[Any]:
        return await self._directory.ask(Lookup(namespace, name))


def _stats(
    row: Queue,
    daemons: int,
    busy: int,
    counts: QueueCounts,
    recent: QueueActivity,
    at: datetime,
    waiting: int,
) -> QueueStats:
    """One snapshot: ``busy`` is bounded by JetStream's ``running`` of the same read.

    A daemon's status is what its last heartbeat said, seconds old; a daemon running an
    invocation of this queue holds at least one of its unacknowledged deliveries, so more
    busy daemons than running invocations means heartbeats not yet sent (a batch just
    finished), and the utilisation must not report work JetStream no longer has.
    """
    busy = min(busy, counts.running)
    oldest = recent.oldest_pending_at
    age = None if oldest is None else max(0.0, (at - oldest).total_seconds())
    return QueueStats(
        namespace=row.namespace,
        queue=row.name,
        daemon_count=daemons,
        busy=busy,
        utilization=round(busy / daemons, 4) if daemons else 0.0,
        pending=counts.pending,
        running=counts.running,
        depth=counts.depth,
        state=row.state,
        max_depth=row.max_depth,
        oldest_pending_age_s=_microseconds(age),
        submitted=recent.submitted,
        succeeded=recent.succeeded,
        failed=recent.failed,
        wait_p50_s=_microseconds(recent.wait_p50_s),
        wait_p95_s=_microseconds(recent.wait_p95_s),
        waiting_submits=waiting,
        cancelled=recent.cancelled,
    )


def _microseconds(seconds: float | None) -> float | None:
    """Seconds to the microsecond: the clocks' resolution, without a quantile's float tail
    (``1.7521550000000001``)."""
    return None if seconds is None else round(seconds, 6)


def _check_defaults(defaults: QueueDefaults | None) -> None:
    """A queue's default request is checked as an invocation's is.

    Raises:
        Invalid: a field out of range, named ``defaults.resources.…``.
    """
    if defaults is not None and defaults.resources is not None:
        check_resources("defaults", defaults.resources)
