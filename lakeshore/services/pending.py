"""How many invocations each org has pending: read from JetStream, estimated between reads.

The ``pending_per_org`` quota is checked on every submit, but JetStream knows a queue's
pending count only per queue (a few requests each), and an org may have thousands of
queues. So :class:`PendingTally` reads an org's queues once, then adds what it admits.
Between reads the estimate can only err high (the claims of daemons are not seen; and a
queue whose consumer cannot answer, still electing its leader after a NATS node came back,
is read as its stream's depth, delivered invocations included), so a
submit that it would put over the quota first has the org read again — at most once per
``refresh_s`` — and is refused only on a count at most that old. It can err low by the
submits in flight while a read runs, and by what a failed submit admitted anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from lakeshore import quotas
from lakeshore.bus.port import Bus
from lakeshore.model import Namespace, Queue, QueueState, levels_of
from lakeshore.quotas import Quotas

#: Queues whose counts are read at the same time (each read is a few NATS requests).
READ_CONCURRENCY = 64
#: Least time between two reads of one org when it is at its quota (seconds).
REFRESH_S = 1.0


class OrgRows(Protocol):
    """The namespace and queue reads an org's count needs."""

    async def get_namespace(self, name: str) -> Namespace | None: ...

    async def list_namespaces(self, org: str | None = None) -> list[Namespace]: ...

    async def list_queues(
        self, namespaces: list[str], state: QueueState | None = None
    ) -> list[Queue]: ...


async def org_pending(store: OrgRows, bus: Bus, org: str) -> int:
    """The invocations pending (stored, not yet delivered) in every queue of ``org``.

    Raises:
        Unavailable: a queue's stream did not answer.
    """
    names = [ns.name for ns in await store.list_namespaces(org)]
    rows = await store.list_queues(names) if names else []
    gate = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(q: Queue) -> int:
        async with gate:
            return await bus.queue_backlog(q.namespace, q.name, levels=levels_of(q.kind))

    return sum(await asyncio.gather(*(one(q) for q in rows)))


@dataclass(slots=True)
class _Org:
    #: the estimate: the last read plus what was admitted since
    pending: int = 0
    #: when the last read began (``None``: never read)
    read_at: float | None = None
    #: units reserved ever (a read adds those reserved while it ran)
    reserved: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class PendingTally:
    """Checks ``pending_per_org`` on submit (see the module's docstring).

    Args:
        store: namespace and queue rows.
        bus: the queues' pending counts.
        quotas: the server's quotas.
        refresh_s: least time between two reads of an org at its quota (seconds).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        store: OrgRows,
        bus: Bus,
        quotas: Quotas,
        *,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store, self._bus, self._quotas = store, bus, quotas
        self._refresh_s, self._clock = refresh_s, clock
        self._orgs: dict[str, _Org] = {}
        #: namespace -> org (a namespace never changes org)
        self._org_of: dict[str, str] = {}

    async def reserve(self, namespace: str, wanted: int) -> str | None:
        """Count ``wanted`` invocations about to be submitted to ``namespace``.

        Returns:
            The org they were counted in (give it to :meth:`release` if the submit
            fails), or ``None`` for a namespace without a row (nothing counted).

        Raises:
            QuotaExceeded: ``pending_per_org``; nothing counted.
            Unavailable: the org had to be read and NATS did not answer.
        """
        org = await self._org(namespace)
        if org is None:
            return None
        state = self._orgs.setdefault(org, _Org())
        over = state.pending + wanted > self._quotas.pending_per_org
        if state.read_at is None or (over and self._clock() - state.read_at >= self._refresh_s):
            await self._read(org, state)
        quotas.check_pending(self._quotas, org, state.pending, wanted)
        state.pending += wanted
        state.reserved += wanted
        return org

    def release(self, org: str | None, count: int) -> None:
        """Take back a reservation whose submit failed."""
        if org is not None and (state := self._orgs.get(org)) is not None:
            state.pending = max(0, state.pending - count)

    async def _read(self, org: str, state: _Org) -> None:
        asked_at = self._clock()
        async with state.lock:
            if state.read_at is not None and state.read_at >= asked_at:
                return  # read by a concurrent submit while this one waited
            began, reserved = self._clock(), state.reserved
            counted = await org_pending(self._store, self._bus, org)
            state.pending = counted + (state.reserved - reserved)
            state.read_at = began

    async def _org(self, namespace: str) -> str | None:
        org = self._org_of.get(namespace)
        if org is None and (row := await self._store.get_namespace(namespace)) is not None:
            org = self._org_of[namespace] = row.org
        return org
