"""Claiming: which member queue and level to pull from next, and the nudges that wake us.

Membership comes from the registry (the register answer, then every heartbeat reply);
``[]`` is the default queue. Queues are scanned round-robin, starting after the queue that
last supplied work, so two busy queues alternate. Within a queue the levels go 9 → 0
(fifo: 0 only), strictly: a lower level is pulled only for slots the higher ones could not
fill. Queues the controller leased to the daemon (steal grants) come after all of its
own, until their lease ends. A queue's kind is learnt once per membership from its
consumers (``p9`` exists only on priority queues) and forgotten when membership changes or
the queue disappears.

A claimed message is run only if the invocation it carries belongs to the stream it came
from: one naming another namespace or queue (a control plane tricked into publishing it
there) is refused — its ``failed`` event, saying why, is stored in the stream's namespace,
then the message is terminated — and never run.

A redelivery of an invocation this daemon runs now (a peer's NAK of its delivery) is handed
back at once: one daemon never runs an invocation twice at the same time. Any other
redelivery (a delivery count above 1) is checked with the control plane first
(:mod:`.policies.redelivery`): one whose earlier attempt a live daemon still holds is handed
back; a poison pill (``max_lost`` attempts lost in a row) is not run but ends ``failed``
with reason ``lost_too_often`` — its ``Result`` put, its ``failed`` event stored, then the
message terminated; any other carries how its earlier attempts ended (:attr:`Claim.earlier`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

import msgspec

from lakeshore.attempts import LOST_TOO_OFTEN
from lakeshore.bus import codec
from lakeshore.bus.work import Msg, QueueLayout, Subscriptions, WorkBus
from lakeshore.daemon.policies.redelivery import check_redelivery, lost_too_often
from lakeshore.daemon.policies.retries import FIRST, Earlier
from lakeshore.errors import Forbidden, LakeshoreError, QueueNotFound
from lakeshore.model import (
    DEFAULT_QUEUE,
    ClaimMark,
    EventBatch,
    EventType,
    Invocation,
    InvocationEvent,
    RemoteError,
    Result,
    Takeover,
    now,
)

log = logging.getLogger(__name__)

#: A redelivery of what this daemon runs comes back after this long (seconds); by then the
#: run has ended and its ack removed the message, or it is handed back again.
MINE_RETRY_S = 5.0


@dataclass(frozen=True, slots=True)
class Claim:
    """One delivered invocation and its attempt token ``(seq, epoch)``."""

    msg: Msg
    invocation: Invocation
    queue: str
    level: int
    #: stream sequence of the message
    seq: int
    #: JetStream delivery count of this claim (a hand-back or a peer's NAK raises it)
    epoch: int
    #: the consumer's ack_wait: renew the claim well within it (seconds)
    ack_wait_s: float
    #: from a queue leased by the controller, not one of the worker's own
    stolen: bool = False
    #: how the earlier attempts ended (the control plane's tally, for a redelivery)
    earlier: Earlier = FIRST
    #: when the delivery reached the daemon (before a redelivery's check): the claim's time
    delivered_at: datetime | None = None
    #: the earlier attempt this one takes over (its daemon died, or let it go)
    takeover: Takeover | None = None
    #: its place in this daemon process's claims (heartbeats carry the latest)
    mark: ClaimMark | None = None
    #: bytes of its message (the submission's record keeps a small function's arguments)
    size: int = 0

    @property
    def number(self) -> int:
        """Its attempt number (1, 2, …): ``LAKESHORE_ATTEMPT``, its log's, its events'."""
        return self.earlier.number(self.epoch)


class Claimer:
    """Pulls work for one daemon from its member queues.

    Args:
        bus: the daemon's NATS handle.
        namespace: the daemon's namespace.
        on_nudge: called (on the event loop) whenever a member queue received work.
        worker_id: the daemon's id, which the ``failed`` event of a refused message names.
    """

    def __init__(
        self,
        bus: WorkBus,
        namespace: str,
        on_nudge: Callable[[], None],
        *,
        worker_id: str,
        runs_here: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self._bus = bus
        self._runs_here = runs_here
        self._ns = namespace
        self._worker_id = worker_id
        self._on_nudge = on_nudge
        self._queues: list[str] = []
        self._layouts: dict[str, QueueLayout] = {}
        self._missing: set[str] = set()
        self._next = 0
        self._steal: dict[str, datetime] = {}
        self._nudges: Subscriptions | None = None
        self._unavailable = False
        self._in_hand: set[str] = set()
        self._boot = secrets.token_hex(6)
        self._claims = 0

    @property
    def queues(self) -> list[str]:
        """The queues scanned now (the default queue for an empty membership)."""
        return list(self._queues)

    async def set_membership(
        self, membership: list[str], steal: Mapping[str, datetime] | None = None
    ) -> None:
        """Scan these queues from now on; re-subscribe nudges when the set changes.

        Args:
            membership: the worker's queues (``[]``: the default queue).
            steal: queues leased by the controller, each until its time; pulled only for
                slots the member queues leave free.

        Raises:
            Unavailable: the nudge subscriptions could not be made.
        """
        queues = list(dict.fromkeys(membership)) or [DEFAULT_QUEUE]
        leases = {q: until for q, until in (steal or {}).items() if q not in queues}
        same = queues == self._queues and leases.keys() == self._steal.keys()
        self._steal = leases  # a renewed lease only moves its ``until``
        if same and self._nudges is not None:
            return
        log.info("pulling from %s", ", ".join(queues))
        if leases:
            shown = ", ".join(f"{q} until {t:%H:%M:%S}" for q, t in leases.items())
            log.info("stealing from %s", shown)
        self._queues = queues
        self._layouts.clear()
        self._missing.clear()
        self._next = 0
        await self.close()
        self._nudges = await self._bus.subscribe_nudges(self._ns, [*queues, *leases], self._nudged)

    def _nudged(self, queue: str) -> None:
        self._on_nudge()

    async def close(self) -> None:
        if self._nudges is not None:
            await self._nudges.close()
            self._nudges = None

    async def claim(self, slots: int) -> list[Claim]:
        """Claim up to ``slots`` invocations, most urgent level first, queues in rotation.

        Never raises for NATS trouble: it logs once per outage and answers what it has.
        """
        out: list[Claim] = []
        n = len(self._queues)
        start = self._next
        for i in range(n):
            queue = self._queues[(start + i) % n]
            got = await self._claim_queue(queue, slots - len(out))
            if got:
                out += got
                self._next = (start + i + 1) % n
            if len(out) >= slots:
                return out
        ts = now()
        for queue, until in self._steal.items():
            if until > ts:
                out += await self._claim_queue(queue, slots - len(out), stolen=True)
                if len(out) >= slots:
                    break
        return out

    async def _claim_queue(self, queue: str, slots: int, stolen: bool = False) -> list[Claim]:
        out: list[Claim] = []
        try:
            layout = await self._layout(queue)
            if layout is None:
                return out
            for level in layout.levels:
                for msg in await self._bus.claim(self._ns, queue, level, slots - len(out)):
                    claim = await self._decode(msg, queue, level, layout, stolen)
                    if claim is not None:
                        out.append(claim)
                if len(out) >= slots:
                    break
        except QueueNotFound:
            self._layouts.pop(queue, None)
        except LakeshoreError as e:
            if not self._unavailable:
                log.warning("cannot claim from %s/%s: %s", self._ns, queue, e)
            self._unavailable = True
            return out
        if self._unavailable:
            log.info("claiming again from %s/%s", self._ns, queue)
            self._unavailable = False
        return out

    async def _layout(self, queue: str) -> QueueLayout | None:
        layout = self._layouts.get(queue)
        if layout is None:
            # Not cached while missing: the default queue's stream appears on first use.
            layout = await self._bus.queue_layout(self._ns, queue)
            if layout is None:
                if queue not in self._missing:
                    log.warning("queue %s/%s has no stream yet; waiting for it", self._ns, queue)
                    self._missing.add(queue)
            else:
                self._missing.discard(queue)
                self._layouts[queue] = layout
        return layout

    def latest(self) -> ClaimMark | None:
        """The mark of the latest claim taken (``None``: none yet)."""
        return ClaimMark(self._boot, self._claims) if self._claims else None

    def in_hand(self) -> set[str]:
        """The invocations claimed and not yet handed to the dispatcher (:meth:`handed_over`):
        a heartbeat reports them as running, since their claim is already marked."""
        return set(self._in_hand)

    def handed_over(self, claims: list[Claim]) -> None:
        """``claims`` are the dispatcher's now: started, or given back."""
        for claim in claims:
            self._in_hand.discard(claim.invocation.id)

    async def _decode(
        self, msg: Msg, queue: str, level: int, layout: QueueLayout, stolen: bool
    ) -> Claim | None:
        meta = msg.metadata
        delivered_at = now()
        try:
            inv = codec.decode(msg.data, Invocation)
        except msgspec.DecodeError as e:
            # Nobody can ever run it: remove it rather than let it cycle through daemons.
            log.error(
                "terminating unreadable message %s/%s seq %d: %s",
                self._ns,
                queue,
                meta.sequence.stream,
                e,
            )
            await self._bus.term(msg)
            return None
        if (inv.namespace, inv.queue) != (self._ns, queue):
            await self._refuse(msg, inv, queue)
            return None
        # Its claim is marked: every heartbeat from now on reports it as running until it
        # ends (the control plane reads a report past its mark without it as its daemon
        # having let it go).
        self._claims += 1
        mark = ClaimMark(self._boot, self._claims)
        self._in_hand.add(inv.id)
        claim = await self._vet(
            msg, inv, queue, level, layout, stolen, delivered_at=delivered_at, mark=mark
        )
        if claim is None:
            self._in_hand.discard(inv.id)
        return claim

    async def _vet(
        self,
        msg: Msg,
        inv: Invocation,
        queue: str,
        level: int,
        layout: QueueLayout,
        stolen: bool,
        *,
        delivered_at: datetime,
        mark: ClaimMark,
    ) -> Claim | None:
        """The claim of a redelivery is run only if the control plane's answer says so."""
        meta = msg.metadata
        epoch = meta.num_delivered
        earlier, takeover = FIRST, None
        if epoch > 1 and self._runs_here(inv.id):
            # A peer's NAK (or the control plane's, for a daemon it took for lost) of the run
            # this daemon holds: never a second execution beside it, whoever answers what.
            log.info(
                "%s attempt %d: it runs here; handed back for %.0f s",
                inv.id, epoch, MINE_RETRY_S,
            )  # fmt: skip
            await self._bus.nak(msg, MINE_RETRY_S)
            return None
        if epoch > 1:
            check = await check_redelivery(self._bus, inv, epoch, self._worker_id)
            if (held := check.held) is not None:
                log.info(
                    "%s attempt %d: attempt %d is still held by %s; handed back for %.0f s",
                    inv.id, epoch, held.epoch, held.holder, held.retry_s,
                )  # fmt: skip
                await self._bus.nak(msg, held.retry_s)
                return None
            earlier, takeover = check.earlier, check.takeover
            if (error := lost_too_often(earlier, inv.max_lost)) is not None:
                await self._dead_letter(msg, inv, queue, error)
                return None
        return Claim(
            msg=msg,
            invocation=inv,
            queue=queue,
            level=level,
            seq=meta.sequence.stream,
            epoch=meta.num_delivered,
            ack_wait_s=layout.ack_wait_s,
            stolen=stolen,
            earlier=earlier,
            delivered_at=delivered_at,
            takeover=takeover,
            mark=mark,
            size=len(msg.data),
        )

    async def _dead_letter(self, msg: Msg, inv: Invocation, queue: str, error: RemoteError) -> None:
        """End a poison pill without running it: its ``Result`` (``error``) put, then its
        ``failed`` event (reason ``lost_too_often``) stored, then its message terminated.
        A step NATS does not take leaves the message to a redelivery, judged again then."""
        meta = msg.metadata
        epoch = meta.num_delivered
        log.warning("%s attempt %d: failed, not run: %s", inv.id, epoch, error.message)
        result = Result(id=inv.id, ok=False, error=error, worker=self._worker_id, epoch=epoch)
        try:
            await self._bus.put_result(inv.namespace, inv.id, epoch, result)
        except LakeshoreError as e:
            log.warning("%s: result not stored (%s); judged again on redelivery", inv.id, e)
            return
        detail = {"seq": meta.sequence.stream, "reason": LOST_TOO_OFTEN,
                  "error": {"type": error.type, "message": error.message}}  # fmt: skip
        await self._fail(msg, inv, queue, detail, f"lost-{inv.namespace}-{inv.id}-{epoch}")

    async def _refuse(self, msg: Msg, inv: Invocation, queue: str) -> None:
        """Record why ``inv`` is not run here, then terminate its message.

        The ``failed`` event is stored first, as an outcome's always is: if it cannot be,
        the message is left for a redelivery after ``ack_wait``, refused again then.
        """
        meta = msg.metadata
        error = Forbidden(
            f"invocation of {inv.namespace}/{inv.queue} arrived on the stream of "
            f"{self._ns}/{queue}: refused"
        )
        log.error("%s attempt %d: %s", inv.id, meta.num_delivered, error.message)
        kind = type(error)
        detail = {
            "seq": meta.sequence.stream,
            "error": {"type": f"{kind.__module__}.{kind.__qualname__}", "message": error.message},
        }
        # One id per message: a refusal repeated after a lost term is stored once.
        await self._fail(
            msg, inv, queue, detail, f"refused-{self._ns}-{queue}-{meta.sequence.stream}"
        )

    async def _fail(
        self, msg: Msg, inv: Invocation, queue: str, detail: dict[str, object], msg_id: str
    ) -> None:
        """Store a ``failed`` event of ``inv`` in the stream's namespace, then terminate
        ``msg`` (the event first, as an outcome's always is)."""
        meta = msg.metadata
        event = InvocationEvent(
            namespace=self._ns,
            queue=queue,
            invocation_id=inv.id,
            ts=now(),
            type=EventType.FAILED,
            attempt=meta.num_delivered,
            worker=self._worker_id,
            epoch=meta.num_delivered,
            detail=detail,
        )
        try:
            await self._bus.publish_events(
                self._ns, queue, EventBatch(events=[event]), msg_id=msg_id
            )
        except LakeshoreError as e:
            log.warning("%s: failure not recorded yet (%s); judged again on redelivery", inv.id, e)
            return
        try:
            await self._bus.term(msg)
        except LakeshoreError as e:
            log.warning("%s: not terminated (%s); judged again on redelivery", inv.id, e)
