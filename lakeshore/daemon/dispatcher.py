"""The Dispatcher: run slots, the claim loop, and the orders that reach a running daemon.

It is the one owner of the daemon's running jobs. Orders arrive in its typed inbox
(:data:`Order`) from the heartbeat (membership, retire), the control subscription (cancel,
retire) and signals (retire, stop now), and are handled one at a time by :meth:`handle`
inside the loop, so the job table needs no locks.

The loop claims as many invocations as there are free slots (a slot frees when its run
ends; settling the claim goes on beside the next run); with nothing claimed it
waits for a nudge, an order or a freed slot, at most ``idle_poll_s`` (a random half to
all of it, so that daemons do not poll in step). A nudge that finds
nothing is checked once more after :data:`NUDGE_RECHECK_S`: JetStream acknowledges a
publish before the consumer counts the message, so a pull at that moment answers "no
messages" for work that is there (another daemon may also simply have taken it). Retiring stops the
claiming, naks what was claimed but not started, and lets the running jobs finish within
``drain_timeout_s``; the ones still running then are interrupted (back to the queue).

**Placement** (spec/resources.md). Each claim's request (``gpus``, ``gpu_type``, ``cpus``,
``memory``; ``cpus 1`` when it names none) is taken from the daemon's :class:`~.ledger.Ledger`
before its run starts, and given back when the run ends; the run's environment gets its
devices (``CUDA_VISIBLE_DEVICES`` …). A claim that can never fit here is handed back for
:data:`NOT_HERE_RETRY_S`. A claim that fits the daemon but not what is free now is **held**:
its lease is renewed, nothing else is claimed, and it starts as soon as the runs ending
free enough. A claim still held after ``hold_s`` is handed back, for a daemon that has room
for it now (two daemons of 2 GPUs and two 2-GPU runs: the first daemon to pull must not keep
both while the other idles), and the daemon keeps it **reserved**: it claims nothing until
what it asked is free, then claims again — and gets it back first if nobody took it (a
consumer serves its redeliveries before new messages). So a large request is never
overtaken for ever by smaller ones behind it: it waits at most for the longest of the runs
that were running when it was claimed (and one poll). Where a
claim may not fit what is free — a daemon with GPUs, or one whose last claim asked for
resources — claims are pulled **one at a time**: each is started or held before the next
is pulled, so none waits in a batch behind a held one. Otherwise (runs asking nothing) a
pull takes as many as there are free slots, and claims of the same batch after a held one
are handed back at once (in their order, for another daemon or the next pull). A hand-back
is a redelivery, which the next daemon checks with the control plane before running it:
1,000 no-ops asking 0-4 GPUs on 4 daemons ran at 125-134 runs/s with batches (about 380
hand-backs), 527-560 runs/s one at a time (none).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
from dataclasses import dataclass
from datetime import datetime

from msgspec import Struct

from lakeshore.daemon.claimer import Claim, Claimer
from lakeshore.daemon.job import Job, JobContext, Stop
from lakeshore.daemon.ledger import DEFAULT_REQUEST, Grant, Ledger
from lakeshore.daemon.policies.lease import Lease
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    Capacity,
    ClaimMark,
    Resources,
    WorkerStatus,
    describe_capacity,
    describe_request,
)

log = logging.getLogger(__name__)

#: After a nudge whose claim found nothing, look once more this soon (seconds).
NUDGE_RECHECK_S = 0.02
#: A claim that can never run here (it asks for more than the daemon has, or another GPU
#: type) is handed back for a time drawn from this range (seconds), so daemons it fits take
#: it meanwhile. Drawn: a fixed delay locks the redelivery to the phase of this daemon's
#: own polls, and it would win the message back every time.
NOT_HERE_RETRY_S = (1.0, 3.0)


class Membership(Struct, frozen=True):
    """Pull from these queues from now on (``[]``: the default queue)."""

    queues: list[str]
    #: queues leased by the controller, each until its time (after the daemon's own)
    steal: dict[str, datetime] = {}


class Cancel(Struct, frozen=True):
    """Stop this invocation if it runs here; it ends as ``cancelled``."""

    invocation_id: str
    #: who cancelled it, as the cancelled event names them
    by: str | None = None


class Retire(Struct, frozen=True):
    """Stop claiming, finish the running jobs within the drain timeout, then return."""

    reason: str


class StopNow(Struct, frozen=True):
    """Interrupt every running job now (a second signal)."""


Order = Membership | Cancel | Retire | StopNow


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the heartbeat reports."""

    status: WorkerStatus
    #: the invocations it runs or has claimed to run
    current: list[str]
    #: the latest claim taken: one at or before it is in ``current`` while held
    claims: ClaimMark | None = None
    #: what no run holds now
    free: Capacity | None = None


@dataclass(slots=True)
class Held:
    """A claim waiting for what it needs to be free (its lease renewed meanwhile)."""

    claim: Claim
    request: Resources
    lease: Lease
    #: when it was held (the loop's clock)
    since: float


class Dispatcher:
    """Claims and runs invocations until retired. Build, :meth:`tell`, then :meth:`run`.

    Args:
        claimer: pulls from the member queues.
        ctx: what each job needs (bus, events, runner, worker id).
        concurrency: run slots.
        idle_poll_s: longest wait without a nudge before scanning again (seconds).
        drain_timeout_s: how long running jobs may take once retiring (seconds).
        ledger: what the daemon has, and what its runs hold.
        hold_s: how long a claim is held for want of free resources before it is handed
            back (and its request reserved), for a daemon that can start it now.
    """

    def __init__(
        self,
        claimer: Claimer,
        ctx: JobContext,
        *,
        concurrency: int,
        idle_poll_s: float,
        drain_timeout_s: float,
        ledger: Ledger,
        hold_s: float,
    ) -> None:
        self._claimer = claimer
        self._ledger = ledger
        #: what each running job holds, by the job's key
        self._grants: dict[int, Grant] = {}
        #: a claim whose request does not fit what is free now, waiting for it
        self._held: Held | None = None
        self._hold_s = hold_s
        #: the request of a held claim handed back: nothing is claimed until it fits
        self._reserved: Resources | None = None
        #: the last claim asked for resources (claims are then pulled one at a time)
        self._asked = False
        self._ctx = ctx
        self._concurrency = concurrency
        self._idle_poll_s = idle_poll_s
        self._drain_timeout_s = drain_timeout_s
        self._inbox: list[Order] = []
        self._wake = asyncio.Event()
        #: a nudge came since the last claim (its claim may come too early)
        self._nudged = False
        # Keyed by a serial, not by (queue, seq): a claim given back can be delivered here
        # again before the job that gave it back has left the table.
        self._jobs: dict[int, Job] = {}
        self._serial = itertools.count()
        self._drain_deadline: float | None = None
        self._interrupted = False
        self._idle = asyncio.Event()
        self._idle.set()

    def tell(self, order: Order) -> None:
        """Queue an order; the loop handles it at its next turn (at once when waiting)."""
        self._inbox.append(order)
        self._wake.set()

    def wake(self) -> None:
        """Scan again now (a nudge: work was admitted to a member queue)."""
        self._nudged = True
        self._wake.set()

    def snapshot(self) -> Snapshot:
        if self._drain_deadline is not None:
            status = WorkerStatus.RETIRING
        else:
            busy = self._jobs or self._held is not None
            status = WorkerStatus.BUSY if busy else WorkerStatus.IDLE
        current = {j.id for j in self._jobs.values()} | self._claimer.in_hand()
        if self._held is not None:
            current.add(self._held.claim.invocation.id)
        return Snapshot(
            status=status,
            current=sorted(current),
            claims=self._claimer.latest(),
            free=self._ledger.free(),
        )

    def runs(self, invocation_id: str) -> bool:
        """Whether a claim of ``invocation_id`` is running, settling or held here."""
        if self._held is not None and self._held.claim.invocation.id == invocation_id:
            return True
        return any(j.id == invocation_id for j in self._jobs.values())

    @property
    def retiring(self) -> bool:
        return self._drain_deadline is not None

    async def wait_idle(self) -> None:
        """Return once no job is running (tests wait on this, never on a sleep)."""
        await self._idle.wait()

    async def run(self) -> None:
        """Claim and run until retired and drained. Jobs run in this call's TaskGroup."""
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as runs:
            while True:
                self._wake.clear()
                await self._handle_inbox()
                if self._drain_deadline is not None:
                    await self._let_go_held("retiring")
                    if not self._jobs:
                        break
                    remaining = self._drain_deadline - loop.time()
                    if remaining <= 0 and not self._interrupted:
                        self._interrupt("the drain timeout passed")
                    await self._wait(max(remaining, 0) or None)
                    continue
                # A slot frees when its run ends: the result put and the ack of one claim
                # overlap the next claim and run, which keeps one slot busy twice as long.
                free = self._concurrency - len(self._grants)  # a grant per run not over
                await self._start_held(runs)
                if self._held is not None:
                    free = 0  # nothing smaller overtakes the held claim
                elif self._reserved is not None and not self._ledger.fits_now(self._reserved):
                    free = 0  # nor the one handed back, until it fits
                else:
                    self._reserved = None
                    if self._one_at_a_time():
                        free = min(free, 1)
                recheck = False
                if free > 0:
                    recheck, self._nudged = self._nudged, False
                    claims = await self._claimer.claim(free)
                    # An order that came during the claim (retire) applies to what it got.
                    await self._handle_inbox()
                    if claims and self._drain_deadline is not None:
                        await self._give_back(claims)
                        self._claimer.handed_over(claims)
                        continue
                    await self._place(runs, claims)
                    self._claimer.handed_over(claims)
                    if claims:
                        continue
                if self._held is not None:
                    await self._wait(max(self._held.since + self._hold_s - loop.time(), 0))
                elif free <= 0:
                    await self._wait(None)
                elif recheck:  # then claim once more; a new nudge would recheck again
                    await self._wait(NUDGE_RECHECK_S)
                else:
                    # Drawn, not fixed: daemons polling in step would hand a message one of
                    # them gave back (not here) to the same one every time.
                    await self._wait(self._idle_poll_s * random.uniform(0.5, 1.0))
        log.info("dispatcher stopped")

    async def handle(self, order: Order) -> None:
        match order:
            case Membership(queues=queues, steal=steal):
                try:
                    await self._claimer.set_membership(queues, steal)
                except LakeshoreError as e:
                    log.warning("membership %s not applied yet: %s", queues, e)
            case Cancel(invocation_id=inv_id, by=by):
                jobs = [j for j in self._jobs.values() if j.id == inv_id]
                if self._held is not None and self._held.claim.invocation.id == inv_id:
                    await self._let_go_held("cancelled before it could start")
                elif not jobs:
                    log.info("cancel of %s: not running here", inv_id)
                for job in jobs:
                    job.stop(Stop.CANCEL, by=by)
            case Retire(reason=reason):
                if self._drain_deadline is None:
                    loop = asyncio.get_running_loop()
                    self._drain_deadline = loop.time() + self._drain_timeout_s
                    log.info(
                        "retiring (%s): %d run(s) to finish within %gs",
                        reason,
                        len(self._jobs),
                        self._drain_timeout_s,
                    )
            case StopNow():
                if self._drain_deadline is None:
                    self._drain_deadline = asyncio.get_running_loop().time()
                self._interrupt("asked to stop now")

    async def _handle_inbox(self) -> None:
        while self._inbox:
            await self.handle(self._inbox.pop(0))

    async def _place(self, runs: asyncio.TaskGroup, claims: list[Claim]) -> None:
        """Start each claim whose request fits what is free; hold the first that does not
        (it runs first once enough is free); hand back the rest (see the module's text)."""
        if claims:
            self._asked = claims[-1].invocation.resources is not None
        for claim in claims:
            request = claim.invocation.resources or DEFAULT_REQUEST
            if not self._ledger.feasible(request):
                await self._not_here(claim, request)
            elif self._held is not None:
                await self._hand_back(claim, 0.0, "a larger run waits here first")
            elif (grant := self._ledger.take(request)) is not None:
                self._start(runs, claim, grant)
            else:
                await self._hold(claim, request)

    def _one_at_a_time(self) -> bool:
        """Whether a claim may not fit what is free (see the module's text)."""
        return self._asked or bool(self._ledger.total.gpus)

    async def _hold(self, claim: Claim, request: Resources) -> None:
        log.info(
            "%s: needs %s; %s free: held until its run frees them, nothing else claimed",
            claim.invocation.id, describe_request(request), describe_capacity(self._ledger.free()),
        )  # fmt: skip
        lease = self._ctx.leases.hold(
            functools.partial(self._ctx.bus.in_progress, claim.msg),
            claim.ack_wait_s,
            claim.invocation.id,
        )
        await lease.__aenter__()
        self._held = Held(claim, request, lease, asyncio.get_running_loop().time())

    async def _start_held(self, runs: asyncio.TaskGroup) -> None:
        """Start the held claim if what it needs is free now; hand it back, reserving what
        it asks, once it was held ``hold_s``."""
        held = self._held
        if held is None:
            return
        if (grant := self._ledger.take(held.request)) is None:
            waited = asyncio.get_running_loop().time() - held.since
            if waited >= self._hold_s:
                self._reserved = held.request
                await self._let_go_held(
                    f"held {waited:.1f} s; {describe_request(held.request)} reserved here, "
                    "nothing else claimed until they are free"
                )
            return
        self._held = None
        await held.lease.__aexit__(None, None, None)
        waited = asyncio.get_running_loop().time() - held.since
        log.info("%s: starts after holding its claim %.1f s", held.claim.invocation.id, waited)
        self._start(runs, held.claim, grant, held=True)

    async def _let_go_held(self, why: str) -> None:
        """Hand the held claim back (retiring, or cancelled while it waited)."""
        held, self._held = self._held, None
        if held is not None:
            await held.lease.__aexit__(None, None, None)
            await self._hand_back(held.claim, 0.0, why)

    async def _not_here(self, claim: Claim, request: Resources) -> None:
        why = (
            f"needs {describe_request(request)}; this daemon has "
            f"{describe_capacity(self._ledger.total)}"
        )
        await self._hand_back(claim, random.uniform(*NOT_HERE_RETRY_S), why)

    async def _hand_back(self, claim: Claim, delay_s: float, why: str) -> None:
        log.info("%s: handed back (%s)", claim.invocation.id, why)
        try:
            await self._ctx.bus.nak(claim.msg, delay_s)
        except LakeshoreError as e:
            log.warning(
                "%s: not handed back (%s); redelivered after ack_wait", claim.invocation.id, e
            )

    def _start(
        self, runs: asyncio.TaskGroup, claim: Claim, grant: Grant, *, held: bool = False
    ) -> None:
        key = next(self._serial)
        job = Job(claim, self._ctx, on_ran=lambda: self._ran(key), devices=grant.env, held=held)
        if self._ctx.metrics is not None:
            self._ctx.metrics.claimed(claim.queue)
        self._jobs[key] = job
        self._grants[key] = grant
        self._idle.clear()
        task = runs.create_task(job.run(), name=f"job {job.id}")
        task.add_done_callback(lambda _: self._finished(key))

    def _ran(self, key: int) -> None:
        """The run of job ``key`` is over (its claim may still be settling): what it held
        is free again."""
        grant = self._grants.pop(key, None)
        if grant is not None:
            self._ledger.give(grant)
        self._wake.set()

    def _finished(self, key: int) -> None:
        self._ran(key)
        self._jobs.pop(key, None)
        if not self._jobs:
            self._idle.set()
        self._wake.set()

    def _interrupt(self, why: str) -> None:
        self._interrupted = True
        if self._jobs:
            log.warning("interrupting %d run(s): %s", len(self._jobs), why)
        for job in self._jobs.values():
            job.stop(Stop.INTERRUPT)

    async def _give_back(self, claims: list[Claim]) -> None:
        for claim in claims:
            try:
                await self._ctx.bus.nak(claim.msg)
            except LakeshoreError as e:
                log.warning(
                    "%s: not given back (%s); redelivered after ack_wait", claim.invocation.id, e
                )
        log.info("retiring: gave back %d claimed invocation(s) not started", len(claims))

    async def _wait(self, timeout_s: float | None) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            pass
