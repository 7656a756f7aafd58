"""One claim's life: started → succeeded / retrying / failed / cancelled.

The job composes the policies (lease, timeout, retries) around the runner, then settles
the claim in the order the data plane fixes:

- success: the ``Result`` in the event ``succeeded`` (stored), ``ack()`` — a result over
  :data:`~lakeshore.model.INLINE_RESULT_BYTES` is put in ``LS_RESULTS`` first, the event
  then without it;
- failure with attempts left (``n`` < ``max_attempts``): event ``retrying`` (stored),
  ``nak(backoff(n))``, ``n`` being this attempt plus the earlier ones that failed — a
  preempted or lost one does not count (:attr:`Claim.earlier`);
- last attempt failed: the ``Result`` as on success, event ``failed`` (stored), ``term()``;
- cancelled: a command's ``Result`` (what it printed, how it was stopped; best effort),
  event ``cancelled`` (stored, with the error saying how), ``term()``;
- interrupted (drain ran out of time): ``nak()`` at once, event ``retrying`` with reason
  ``interrupted`` (the attempt shows ``preempted``, not counted).

A run whose earlier attempt was preempted or lost sees ``LAKESHORE_PREEMPTED=1``.

An outcome's event is stored before the message is acknowledged: a daemon that dies in
between leaves a redelivery (fenced as stale), never a finished run nobody recorded. The
``started`` event is stored before the run starts: a run that kills its daemon at once still
leaves its attempt in the history, ``lost`` (what ``max_lost`` counts). It carries the claim
(queue level, stolen, takeover): a claim that starts at once has no ``claimed`` event of its
own (one event per run fewer, for the daemon, NATS and the history). A claim that waited for
resources first, or was stopped before it started, records ``claimed`` (stamped when it was
delivered) before that. That first event also carries the submission's record
(:mod:`lakeshore.submission`), from which the Recorder makes the ``submitted`` event of an
invocation that has none.

Every event of one job carries its run id (``detail.run``, unique to each claim run): a
delivery count restarted by a server crash can bring the same daemon the same epoch again,
and the history tells the two executions apart by it (``lakeshore/store/jobs.py``).

The lease is renewed until the claim is settled. Storing the result is tried again
through a reconnect (for up to ``ack_wait``); a NATS failure that outlasts that is logged
and left to JetStream: an unacknowledged claim is redelivered after ``ack_wait`` as a new
attempt, and the Recorder fences stale ones. A drain that runs out of time ends the
settling too — the wait for the result to be stored, and the wait for the outcome's event
to be (which has no bound of its own: with NATS gone for good, a daemon would otherwise
never stop) — and leaves the claim to that redelivery.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

import msgspec

from lakeshore import submission
from lakeshore.attempts import CRASHED, TIMED_OUT
from lakeshore.bus import codec
from lakeshore.bus.work import WorkBus
from lakeshore.daemon.claimer import Claim
from lakeshore.daemon.events import EventPublisher
from lakeshore.daemon.policies import (
    Leases,
    RunTimedOut,
    backoff_s,
    cancelled_error,
    how_stopped,
    persist,
    should_retry,
    timed_out_error,
    within,
)
from lakeshore.daemon.runner import Capture, Outcome, Runner
from lakeshore.errors import LakeshoreError, TooLarge, Unavailable
from lakeshore.model import (
    INLINE_RESULT_BYTES,
    RESULT_DETAIL,
    EventType,
    InvocationEvent,
    Isolation,
    RemoteError,
    Result,
    now,
)

if TYPE_CHECKING:
    from lakeshore.daemon.metrics import DaemonMetrics
    from lakeshore.daemon.runlog import RunLog, RunLogs

log = logging.getLogger(__name__)

_STOLEN = {False: "", True: " (stolen)"}
#: Run ids (``detail.run``): new in each daemon process, then counted (a random nonce per
#: run cost a system call each).
_RUN_BOOT, _RUNS = secrets.token_hex(4), itertools.count(1)
#: How long a run waits for its ``started`` (or ``claimed``) event to be stored before it
#: starts anyway (the event stays buffered, ahead of the others): a run is not held up by a
#: stream that does not take events, and a daemon dying at once is still counted when it does.
CLAIM_STORED_S = 5.0
#: Longest error message carried in an event; the full error is in the Result.
EVENT_MESSAGE_CHARS = 1_000
#: What every run sees in its environment, over its own ``env``: the invocation's id and
#: this attempt's number (1, 2, …: :attr:`Claim.number`, not the delivery count).
JOB_ID_VAR, ATTEMPT_VAR = "LAKESHORE_JOB_ID", "LAKESHORE_ATTEMPT"
#: Set to ``1`` for a run when an earlier attempt was preempted or lost (its daemon
#: stopped, retired or died under it): training code resumes from its checkpoint.
PREEMPTED_VAR = "LAKESHORE_PREEMPTED"


class Stop(Enum):
    """Why a run was stopped before it ended."""

    #: a user's cancel order: the invocation ends as cancelled
    CANCEL = "cancel"
    #: the daemon is stopping and ran out of drain time: the attempt goes back
    INTERRUPT = "interrupt"


@dataclass(frozen=True, slots=True)
class JobContext:
    """What every job of one daemon shares."""

    bus: WorkBus
    events: EventPublisher
    runner: Runner
    worker_id: str
    #: claims and runs counted for ``--metrics-port`` (``None``: not counted)
    metrics: DaemonMetrics | None = None
    #: where runs' output goes live (``None``: kept only in the result's tails)
    logs: RunLogs | None = None
    #: renews the claims held
    leases: Leases = field(default_factory=Leases)


class Job:
    """Runs one claim from its ``claimed`` event to its final ack, nak or term.

    Args:
        claim: the delivered invocation.
        ctx: what the daemon's jobs share.
        on_ran: called once the run is over, before the claim is settled (the dispatcher
            then frees the run slot and what the run held).
        devices: the run's device variables (``CUDA_VISIBLE_DEVICES`` …: its grant's).
        held: the claim waited for resources before it was started (its ``claimed`` event
            then tells when it was claimed).
    """

    def __init__(
        self,
        claim: Claim,
        ctx: JobContext,
        on_ran: Callable[[], None],
        devices: Mapping[str, str] | None = None,
        *,
        held: bool = False,
    ) -> None:
        self.claim = claim
        self._held = held
        self._devices = dict(devices or {})
        self.id = claim.invocation.id
        #: until the run is over (the claim may still be settling after that)
        self.running = True
        self._on_ran = on_ran
        self._ctx = ctx
        self._stop: Stop | None = None
        self._cancelled_by: str | None = None
        self._run: asyncio.Task[Outcome] | None = None
        #: the run's output and how it was stopped, once it has started
        self._capture: Capture | None = None
        self._label = f"{self.id} attempt {claim.number}"
        #: the drain ran out of time: settling stops waiting for NATS
        self._out_of_time = False
        #: this job's task while it waits for an outcome's event to be stored
        self._recording: asyncio.Task[Any] | None = None
        #: this execution's id in every event of it: the epoch alone does not tell two
        #: executions apart once a crashed server has restarted the delivery count
        self.run_id = f"{_RUN_BOOT}{next(_RUNS):x}"

    def stop(self, why: Stop, *, by: str | None = None) -> None:
        """Stop the run (if it is still running) and settle the claim as ``why`` says;
        ``INTERRUPT`` also ends a wait for the outcome's event to be stored. ``by``: who
        cancelled it (the cancelled event names them)."""
        if why is Stop.CANCEL and self._cancelled_by is None:
            self._cancelled_by = by
        if why is Stop.INTERRUPT and not self._out_of_time:
            self._out_of_time = True
            if self._recording is not None:
                self._recording.cancel()
        if self._stop is None:
            self._stop = why
            if self._run is not None:
                self._run.cancel()

    async def run(self) -> None:
        """The whole lifecycle. Never raises except for its own task's cancellation."""
        c = self.claim
        detail: dict[str, Any] = {"seq": c.seq, "level": c.level}
        # The claim's first event carries the submission's record: the history has it even
        # when its ``submitted`` event was never stored (lakeshore/submission.py).
        detail[submission.CARRIED] = submission.carried(c.invocation, c.seq, c.size)
        if c.stolen:
            detail["stolen"] = True
        if c.mark is not None:
            detail["mark"] = [c.mark.boot, c.mark.n]
        log.info("%s: claimed from %s/p%d%s", self._label, c.queue, c.level, _STOLEN[c.stolen])
        if (t := c.takeover) is not None:
            # An event of its own kind would need its own fencing: the claim says it.
            detail["took_over"] = {"attempt": t.epoch, "worker": t.worker, "why": t.why}
            log.info("%s: takes over attempt %d of %s: %s", self._label, t.epoch, t.worker, t.why)
        renew = functools.partial(self._ctx.bus.in_progress, c.msg)
        try:
            # Held until settled: storing the result may wait out a reconnect.
            async with self._ctx.leases.hold(renew, c.ack_wait_s, self._label):
                try:
                    outcome = await self._execute(detail)
                finally:
                    self.running = False
                    self._on_ran()
                await self._settle(outcome)
        except LakeshoreError as e:
            log.warning("%s: not settled (%s); JetStream will redeliver it", self._label, e)
        except Exception:
            log.exception("%s: failed inside the daemon; JetStream will redeliver it", self._label)

    async def _stored(self, type_: EventType, detail: dict[str, Any], at: datetime | None) -> None:
        """Record the claim's first event before its run starts (see the module's text)."""
        try:
            await self._record(type_, detail, at=at, within_s=CLAIM_STORED_S)
        except TimeoutError:
            log.warning(
                "%s: its %s event was not stored within %gs; running it anyway",
                self._label,
                type_,
                CLAIM_STORED_S,
            )

    async def _execute(self, claimed: dict[str, Any]) -> Outcome | None:
        """Run under its timeout; ``None`` when stopped by :meth:`stop`. ``claimed``: the
        claim's detail, which the ``started`` event carries when the run starts at once."""
        c = self.claim
        if self._held or self._stop is not None:
            # Its claim is a fact of its own: the run waited for resources, or never starts.
            await self._stored(EventType.CLAIMED, claimed, c.delivered_at)
            if self._stop is not None:
                return None
            claimed = {"seq": c.seq}
        inv = c.invocation
        started = claimed if inv.code is None else {**claimed, "code": inv.code}
        await self._stored(EventType.STARTED, started, None)
        if self._stop is not None:  # stopped while its start was being stored
            return None
        live = self._ctx.logs.open(inv, c.number) if self._ctx.logs is not None else None
        capture = self._capture = Capture(sink=live.write if live is not None else None)
        capture.on_term = self._terminating
        log.info("%s: started", self._label)
        env = {JOB_ID_VAR: inv.id, ATTEMPT_VAR: str(c.number)} | _preempted(c)
        mark = f"{inv.id}.{self.run_id}"
        run = functools.partial(
            self._ctx.runner.run, inv, capture, env=env, mark=mark, devices=self._devices
        )
        # The run's coroutine is made inside the task: a task cancelled before its first step
        # (a stop right after this) leaves no coroutine that was never awaited.
        self._run = asyncio.create_task(_timed(inv.timeout_s, run), name=self._label)
        if self._stop is not None:  # stopped while the run was being set up
            self._run.cancel()
        try:
            return await self._ran(live)
        except RunTimedOut as e:
            return Outcome(
                ok=False,
                error=timed_out_error(e, self._how_stopped()),
                exit_code=capture.exit_code,
                output=capture.text() if inv.command else None,
                stderr=capture.stderr_text() if inv.command else None,
                timed_out=True,
            )
        except asyncio.CancelledError:
            # Our own stop() cancelled the run; a cancellation of this task is not ours.
            task = asyncio.current_task()
            if self._stop is None or (task is not None and task.cancelling()):
                raise
            return None

    async def _ran(self, live: RunLog | None) -> Outcome:
        """The run's outcome; its live log is ended however the run ended (what it still
        buffers goes out in the background)."""
        assert self._run is not None
        try:
            return await self._run
        finally:
            if live is not None:
                live.end()

    async def _settle(self, outcome: Outcome | None) -> None:
        bus, c = self._ctx.bus, self.claim
        if outcome is None:
            if self._stop is Stop.CANCEL:
                await self._record(EventType.CANCELLED, await self._cancelled())
                await self._finish(bus.term(c.msg), "term")
                log.info("%s: cancelled", self._label)
            else:
                await bus.nak(c.msg)
                self._emit(EventType.RETRYING, {"seq": c.seq, "reason": "interrupted"})
                log.info("%s: interrupted, back to the queue", self._label)
            return
        if outcome.ok:
            try:
                carried = await self._store_result(outcome)
            except TooLarge as e:
                # No retry of the put can store it: the attempt fails. (Any other failure
                # leaves the claim unsettled, for JetStream to redeliver after ack_wait.)
                error = RemoteError(type="lakeshore.ResultTooLarge", message=str(e))
                outcome = Outcome(ok=False, error=error, exit_code=outcome.exit_code)
            else:
                await self._record(EventType.SUCCEEDED, self._detail(outcome, carried))
                await self._finish(bus.ack(c.msg), "ack")
                log.info("%s: succeeded", self._label)
                return
        # Counted among the attempts that count: a preempted or lost one does not.
        attempt = c.earlier.attempt(c.epoch)
        if should_retry(attempt, c.invocation.max_attempts):
            delay = backoff_s(attempt)
            await self._record(EventType.RETRYING, {**self._detail(outcome), "delay_s": delay})
            await bus.nak(c.msg, delay)
            log.info("%s: failed (%s), retrying in %gs", self._label, _brief(outcome), delay)
        else:
            carried = await self._store_result(outcome)
            await self._record(EventType.FAILED, self._detail(outcome, carried))
            await self._finish(bus.term(c.msg), "term")
            log.info("%s: failed (%s), no attempts left", self._label, _brief(outcome))

    async def _cancelled(self) -> dict[str, Any]:
        """The ``cancelled`` event's detail; a command that ran gets its ``Result`` stored
        first, with what it printed (a failed put is logged: the cancel stands)."""
        detail: dict[str, Any] = {"seq": self.claim.seq}
        if self._cancelled_by is not None:
            detail["by"] = self._cancelled_by
        capture = self._capture
        if capture is None:  # stopped before it started
            return detail
        error = cancelled_error(self._how_stopped())
        detail["error"] = _short(error)
        if self.claim.invocation.command is None:
            return detail
        if capture.exit_code is not None:
            detail["exit_code"] = capture.exit_code
        outcome = Outcome(
            ok=False,
            error=error,
            exit_code=capture.exit_code,
            output=capture.text(),
            stderr=capture.stderr_text(),
        )
        try:
            await self._put_result(self._result(outcome))
        except LakeshoreError as e:
            log.warning("%s: the cancelled run's output is not stored: %s", self._label, e)
        return detail

    def _terminating(self, grace_s: float) -> None:
        """Its stop has sent SIGTERM: say so (the job shows ``stopping`` while the grace
        runs)."""
        timeout_s = self.claim.invocation.timeout_s
        why = {
            Stop.CANCEL: "cancel requested",
            Stop.INTERRUPT: "its daemon is stopping",
            None: f"timed out after {timeout_s:g} s" if timeout_s else "stopped",
        }[self._stop]
        self._emit(EventType.STOPPING, {"seq": self.claim.seq, "why": why, "grace_s": grace_s})

    def _how_stopped(self) -> str:
        stopped = self._capture.stopped if self._capture is not None else None
        inv = self.claim.invocation
        return how_stopped(stopped, inline=inv.fn is not None and inv.isolation is Isolation.INLINE)

    async def _finish(self, call: Awaitable[None], what: str) -> None:
        """The final ack or term: the run is over whether or not the server heard it."""
        try:
            await call
        except LakeshoreError as e:
            # The outcome stands (and is stored); a redelivered attempt is fenced as stale.
            log.warning("%s: %s not confirmed: %s", self._label, what, e)

    async def _store_result(self, outcome: Outcome) -> msgspec.Raw | None:
        """The result as its outcome event carries it (its JSON), or ``None`` once it is put
        in ``LS_RESULTS`` (over :data:`~lakeshore.model.INLINE_RESULT_BYTES`)."""
        result = self._result(outcome)
        data = codec.encode(result)
        if len(data) <= INLINE_RESULT_BYTES:
            return msgspec.Raw(data)
        await self._put_result(result)
        return None

    def _result(self, outcome: Outcome) -> Result:
        return Result(
            id=self.id,
            ok=outcome.ok,
            value=outcome.value,
            error=outcome.error,
            worker=self._ctx.worker_id,
            epoch=self.claim.epoch,
            exit_code=outcome.exit_code,
            output=outcome.output,
            stderr=outcome.stderr,
        )

    async def _put_result(self, result: Result) -> None:
        c = self.claim
        await persist(
            lambda: self._ctx.bus.put_result(c.invocation.namespace, self.id, c.epoch, result),
            within_s=c.ack_wait_s,
            what=f"{self._label}: result not stored",
            # A drain out of time stops settling too: the claim is redelivered.
            give_up=lambda: self._out_of_time,
        )

    def _detail(self, outcome: Outcome, carried: msgspec.Raw | None = None) -> dict[str, Any]:
        """An outcome event's detail; ``carried``: its result (:meth:`_store_result`)."""
        detail: dict[str, Any] = {"seq": self.claim.seq}
        if carried is not None:
            detail[RESULT_DETAIL] = carried
        if outcome.exit_code is not None:
            detail["exit_code"] = outcome.exit_code
        if outcome.error is not None:
            detail["error"] = _short(outcome.error)
        if outcome.code_version is not None:
            detail["code_version"] = outcome.code_version
        if outcome.timed_out:
            stopped = self._capture.stopped if self._capture is not None else None
            detail["cause"] = TIMED_OUT
            detail["killed"] = stopped is not None and stopped.killed  # SIGKILL was needed
        elif outcome.crashed is not None:
            detail["cause"], detail["signal"] = CRASHED, outcome.crashed
        return detail

    def _emit(self, type_: EventType, detail: dict[str, Any]) -> None:
        self._ctx.events.emit(self._event(type_, detail))

    async def _record(
        self,
        type_: EventType,
        detail: dict[str, Any],
        at: datetime | None = None,
        within_s: float | None = None,
    ) -> None:
        """Emit an outcome's event and wait until JetStream has stored it.

        Raises:
            TimeoutError: it was not stored within ``within_s`` (``None``: no bound); it
                stays buffered.
            Unavailable: the drain ran out of time first; the event stays buffered (it goes
                with the daemon's last flush if NATS takes it), the claim is not settled.
        """
        event = self._event(type_, detail, at)
        if self._out_of_time:
            self._ctx.events.emit(event)
            raise Unavailable(f"the drain ran out of time before the {type_} event was stored")
        task = asyncio.current_task()
        self._recording = task
        try:
            await self._ctx.events.publish(event, within_s=within_s)
        except asyncio.CancelledError:
            # Ours (stop() with INTERRUPT) only if nobody else cancelled the task too.
            if self._out_of_time and task is not None and task.uncancel() == 0:
                raise Unavailable(
                    f"the drain ran out of time before the {type_} event was stored"
                ) from None
            raise
        finally:
            self._recording = None

    def _event(
        self, type_: EventType, detail: dict[str, Any], at: datetime | None = None
    ) -> InvocationEvent:
        c = self.claim
        return InvocationEvent(
            namespace=c.invocation.namespace,
            queue=c.queue,
            invocation_id=self.id,
            ts=at or now(),
            type=type_,
            attempt=c.number,
            worker=self._ctx.worker_id,
            epoch=c.epoch,
            detail={**detail, "run": self.run_id},
        )


def _preempted(claim: Claim) -> dict[str, str]:
    return {PREEMPTED_VAR: "1"} if claim.earlier.preempted else {}


def _short(error: RemoteError) -> dict[str, str]:
    return {"type": error.type, "message": error.message[:EVENT_MESSAGE_CHARS]}


def _brief(outcome: Outcome) -> str:
    if outcome.error is None:
        return "no error"
    return f"{outcome.error.type}: {outcome.error.message[:200]}"


async def _timed(timeout_s: float | None, run: Callable[[], Awaitable[Outcome]]) -> Outcome:
    return await within(timeout_s, run())
