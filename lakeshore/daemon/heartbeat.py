"""Heartbeats: report status every ``heartbeat_s`` and apply what the registry answers.

The reply is the daemon's source of membership (``queues``: ``[]`` is the default queue);
a change (or a change of the controller's steal leases) becomes a
:class:`~lakeshore.daemon.dispatcher.Membership` order, ``retire`` a
:class:`~lakeshore.daemon.dispatcher.Retire`. ``unknown: true`` means the registry lost
the worker's row (deleted, or a store reset): the daemon registers again under its id.
A missed heartbeat is only logged: the daemon keeps working on the last membership —
unless it was given ``orphan_after_s`` (a daemon the ``local`` provider started): with no
heartbeat answered for that long, its control plane is taken for gone and the daemon
retires (drains as a stop would, then exits) rather than living on as an orphan nothing
accounts for. A daemon started by hand waits for its control plane for ever.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import msgspec

from lakeshore.bus.connection import check_cancelled
from lakeshore.bus.work import WorkBus
from lakeshore.daemon.credential import Credential
from lakeshore.daemon.dispatcher import Dispatcher, Membership, Retire
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    Capacity,
    ClaimMark,
    Heartbeat,
    HeartbeatReply,
    Worker,
    WorkerRegister,
    WorkerStatus,
    now,
)

log = logging.getLogger(__name__)


class Heartbeater:
    """Sends heartbeats for one registered worker.

    Args:
        bus: the daemon's NATS handle.
        worker: the registered row (its id and membership).
        registration: what the daemon registered with, to register again.
        dispatcher: reports status and takes the orders of each reply.
        every_s: heartbeat period (seconds).
        credential: renewed through the heartbeats.
        orphan_after_s: retire once no heartbeat was answered for this long (seconds);
            ``None``: wait for the control plane for ever.
    """

    def __init__(
        self,
        bus: WorkBus,
        worker: Worker,
        registration: WorkerRegister,
        dispatcher: Dispatcher,
        every_s: float,
        credential: Credential,
        *,
        orphan_after_s: float | None = None,
    ) -> None:
        self._bus = bus
        self._credential = credential
        self.worker = worker
        self._registration = registration
        self._dispatcher = dispatcher
        self._every_s = every_s
        self._queues = list(worker.queues)
        self._steal: dict[str, datetime] = {}
        self._failing = False
        self._beats = 0
        self._beat = asyncio.Condition()
        self._orphan_after_s = orphan_after_s
        # Counted from the registration, which the control plane answered.
        self._answered_at = asyncio.get_running_loop().time()
        self._orphaned = False

    async def run(self) -> None:
        """Beat every ``every_s`` until cancelled."""
        while True:
            await asyncio.sleep(self._every_s)
            try:
                await self.beat()
            except Exception:
                # A bug in applying one reply must not stop the heartbeats: without them
                # the registry marks the daemon lost while it still runs jobs.
                log.exception("heartbeat failed")
            # Else a cancellation nats-py swallowed would leave the daemon never stopping.
            check_cancelled()

    async def beat(self) -> HeartbeatReply | None:
        """Send one heartbeat and apply its reply; ``None`` when nobody answered."""
        snap = self._dispatcher.snapshot()
        try:
            reply = await self._send(snap.status, snap.current, snap.claims, snap.free)
        except LakeshoreError as e:
            if not self._failing:
                log.warning("heartbeat not answered: %s", e)
            self._failing = True
            self._retire_if_orphaned()
            return None
        self._answered_at = asyncio.get_running_loop().time()
        if self._failing:
            log.info("heartbeat answered again")
            self._failing = False
        await self._apply(reply)
        async with self._beat:
            self._beats += 1
            self._beat.notify_all()
        return reply

    async def wait_beats(self, count: int) -> None:
        """Return after ``count`` more answered (and applied) heartbeats."""
        async with self._beat:
            target = self._beats + count
            await self._beat.wait_for(lambda: self._beats >= target)

    @property
    def queues(self) -> list[str]:
        """The membership of the last reply (``[]``: the default queue)."""
        return list(self._queues)

    async def final(self, timeout_s: float) -> None:
        """Report ``stopped`` (the deregistration); one try, bounded by ``timeout_s`` — by
        one heartbeat period when the last heartbeat was not answered (the control plane
        is most likely gone: a stop must not wait for it)."""
        if self._failing:
            timeout_s = min(timeout_s, self._every_s)
        try:
            async with asyncio.timeout(timeout_s):
                await self._send(WorkerStatus.STOPPED, [])
        except (LakeshoreError, TimeoutError) as e:
            log.warning("final heartbeat not answered: %s", e)

    def _retire_if_orphaned(self) -> None:
        if self._orphan_after_s is None or self._orphaned:
            return
        silent_s = asyncio.get_running_loop().time() - self._answered_at
        if silent_s >= self._orphan_after_s:
            self._orphaned = True
            why = f"no heartbeat answered for {silent_s:.0f}s: the control plane is gone"
            log.warning("%s; retiring (orphan_after_s %g)", why, self._orphan_after_s)
            self._dispatcher.tell(Retire(why))

    async def _send(
        self,
        status: WorkerStatus,
        current: list[str],
        claims: ClaimMark | None = None,
        free: Capacity | None = None,
    ) -> HeartbeatReply:
        hb = Heartbeat(
            worker_id=self.worker.id,
            namespace=self.worker.namespace,
            status=status,
            current=current,
            ts=now(),
            claims=claims,
            renew=self._credential.due(),
            free=free,
        )
        return await self._bus.heartbeat(hb)

    async def _apply(self, reply: HeartbeatReply) -> None:
        if reply.credential is not None:
            self._credential.renewed(reply.credential)
        if reply.unknown:
            await self._register_again()
            return
        steal = {g.queue: _aware(g.until) for g in reply.steal}
        if reply.queues != self._queues or steal != self._steal:
            if reply.queues != self._queues:
                log.info("membership changed: %s → %s", self._queues or "[]", reply.queues or "[]")
            self._queues, self._steal = list(reply.queues), steal
            self._dispatcher.tell(Membership(self._queues, steal))
        if reply.retire:
            self._dispatcher.tell(Retire("the registry asked to retire"))

    async def _register_again(self) -> None:
        reg = msgspec.structs.replace(
            self._registration, id=self.worker.id, queues=list(self._queues)
        )
        try:
            self.worker = await self._bus.register(reg)
        except LakeshoreError as e:
            log.warning("the registry forgot worker %s and refused it again: %s", reg.id, e)
            return
        log.info("registered again as %s (%s)", self.worker.name, self.worker.id)
        if self.worker.queues != self._queues:
            self._queues = list(self.worker.queues)
            self._dispatcher.tell(Membership(self._queues, self._steal))


def silence_after(after_s: float | None) -> asyncio.Event:
    """An event set ``after_s`` seconds from now (never for ``None``): until a daemon has
    registered, its control plane's silence counts from the daemon's start.

    Args:
        after_s: ``orphan_after_s`` (seconds), or ``None``.
    """
    silent = asyncio.Event()
    if after_s is not None:
        asyncio.get_running_loop().call_later(after_s, silent.set)
    return silent


def _aware(ts: datetime) -> datetime:
    """A lease end without a zone is UTC (the control plane's clock)."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
