"""Lost runs: what a daemon was running goes back to its queue when it is declared lost.

A daemon that dies mid-run (SIGKILL, its machine gone) leaves its claim to JetStream, which
would redeliver it only when the claim's lease (``ack_wait``, 60 s) runs out, while the job
showed ``running`` on a daemon already ``lost``. When the WorkerRegistry declares a daemon
lost (silent for ``lost_after_s``, or its provider saw it exit), each invocation whose newest
open attempt it claimed (the Recorder's fences) is sent back then:

1. the control plane's ``retrying`` event of that attempt, reason ``lost`` (fenced like any
   completion: a completion the daemon stored meanwhile wins, and this one is ``stale``),
   naming the daemon and when it was last heard — the job is ``pending`` at once, the attempt
   reads ``lost`` and ends when its daemon was last heard, and it does not count toward
   ``max_attempts``;
2. then its message is NAKed (:meth:`~lakeshore.bus.port.Bus.redeliver_now`): the next daemon
   pulls it now. Its claim asks who holds the attempt first, as every redelivery does, and
   finds nobody: the attempt has ended. JetStream takes a NAK for whatever delivery of the
   message is current, so it is sent only while the lost daemon's lease cannot have run out
   (its last renewal came at most ``ack_wait / 3`` before its last heartbeat): after that
   the message may be another daemon's already, and its lease brought it back anyway.

A daemon declared lost that was only cut off runs on: its completion then races the
redelivery's, and the fence keeps one (as it did after a lease ran out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any

from lakeshore.actors.base import ActorRef
from lakeshore.actors.recorder import HeldBy
from lakeshore.attempts import LOST_DAEMON
from lakeshore.bus.port import Bus
from lakeshore.errors import LakeshoreError
from lakeshore.model import EventBatch, EventType, InvocationEvent, Worker, now
from lakeshore.store.port import JobReads

log = logging.getLogger(__name__)

#: The error type a lost attempt shows.
DAEMON_LOST_ERROR = "lakeshore.DaemonLost"
#: How much of a lost daemon's lease must be left for its message to be NAKed (seconds).
LEASE_MARGIN_S = 1.0


class LostRuns:
    """Sends the runs of lost daemons back to their queues (:meth:`lost`, from the registry).

    Args:
        bus: publishes the events and NAKs the messages.
        recorder: knows who holds which attempt.
        store: the history, for each invocation's queue and the attempt's stream sequence.
        lost_after_s: the silence that makes a daemon lost (for the error's words).
        ack_wait_s: the claims' lease: a lost daemon's message is NAKed only well within it.
    """

    def __init__(
        self,
        bus: Bus,
        recorder: ActorRef[Any],
        store: JobReads,
        *,
        lost_after_s: float,
        ack_wait_s: float,
    ) -> None:
        self._bus, self._recorder, self._store = bus, recorder, store
        self._lost_after_s = lost_after_s
        self._ack_wait_s = ack_wait_s
        self._tasks: set[asyncio.Task[int]] = set()

    def lost(self, worker: Worker) -> None:
        """``worker`` was just declared lost: send its runs back (in the background)."""
        task = asyncio.create_task(self.requeue(worker), name=f"requeue runs of {worker.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def requeue(self, worker: Worker) -> int:
        """Send back every run ``worker`` holds; how many were sent back. Failures are
        logged: the lease's redelivery still comes."""
        try:
            held = await self._recorder.ask(HeldBy(worker.namespace, worker.id))
        except LakeshoreError as e:
            log.warning("runs of lost daemon %s not sent back: %s", worker.id, e)
            return 0
        sent = 0
        for inv_id, epoch in held:
            with contextlib.suppress(LakeshoreError):
                sent += await self._send_back(worker, inv_id, epoch)
        return sent

    async def _send_back(self, worker: Worker, inv_id: str, epoch: int) -> bool:
        ns = worker.namespace
        record = await self._store.get_job(ns, inv_id)
        if record is None:  # not in the history yet: its lease's redelivery brings it back
            return False
        job = record.job
        mine = [a for a in job.attempts if a.epoch == epoch and a.worker == worker.id]
        seq, number = (mine[0].seq, mine[0].attempt) if mine else (None, epoch)
        heard = worker.last_heartbeat
        since = f" since {heard:%Y-%m-%d %H:%M:%S} UTC" if heard is not None else ""
        message = (
            f"its daemon {worker.name} ({worker.id}) was lost: no heartbeat for "
            f"{self._lost_after_s:g} s{since}; back to the queue (not counted toward "
            "max_attempts)"
        )
        detail: dict[str, Any] = {
            "seq": seq,
            "reason": LOST_DAEMON,
            "worker": worker.id,
            "error": {"type": DAEMON_LOST_ERROR, "message": message},
        }
        if heard is not None:
            detail["last_heard"] = heard.isoformat()
        event = InvocationEvent(
            namespace=ns, queue=job.queue, invocation_id=inv_id, ts=now(),
            type=EventType.RETRYING, attempt=number, epoch=epoch, detail=detail,
        )  # fmt: skip
        try:
            await self._bus.publish_events(ns, job.queue, EventBatch(events=[event]))
            redelivered = (
                seq is not None
                and self._leased(heard)
                and await self._bus.redeliver_now(ns, job.queue, seq)
            )
        except LakeshoreError as e:
            log.warning("%s/%s attempt %d of lost daemon %s: %s", ns, inv_id, epoch, worker.id, e)
            raise
        log.info(
            "%s/%s attempt %d: its daemon %s is lost; back to queue %s%s",
            ns, inv_id, epoch, worker.id, job.queue, "" if redelivered else " (after its lease)",
        )  # fmt: skip
        return True

    def _leased(self, heard: datetime | None) -> bool:
        """Whether the lost daemon's lease surely still holds its message (a second to
        spare): renewed every ``ack_wait / 3``, it lasts at least ``2/3 ack_wait`` past
        its last heartbeat."""
        if heard is None:
            return False
        left_s = self._ack_wait_s * 2 / 3 - (now() - heard).total_seconds()
        return left_s > LEASE_MARGIN_S
