"""Invocations: what producers submit, what travels on a queue stream, and what jobs show.

An invocation's history is an append-only stream of :class:`InvocationEvent`; its current
state is derived from the latest accepted event. An *attempt token* is the pair (stream
sequence, epoch), the epoch being JetStream's delivery count of the claim.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from lakeshore.model.code import Digest
from lakeshore.model.daemon import ClaimMark
from lakeshore.model.names import DEFAULT_MAX_LOST, DEFAULT_STOP_GRACE_S, MAX_LABEL, MAX_TIMEOUT_S
from lakeshore.model.redact import redacted_fields, redacted_repr
from lakeshore.model.resources import Resources

#: Largest batch one submit may carry.
MAX_BATCH = 10_000
#: Longest ``fn`` (``module:qualname``).
MAX_FN = 512
#: Most arguments of a ``command``.
MAX_ARGV = 4_096
#: Most variables of an invocation's ``env``.
MAX_ENV = 1_024

EnvName = Annotated[str, Meta(min_length=1, max_length=MAX_LABEL)]


class Isolation(StrEnum):
    """Where a function runs on its daemon."""

    #: a worker process of its own (reused for the next run of the same code and env):
    #: stoppable, crashes alone, its output in the run's log
    PROCESS = "process"
    #: a thread of the daemon, for tiny pure-Python functions: cannot be stopped (a
    #: stopped run goes on, its result discarded), cannot take devices or resources
    INLINE = "inline"


class InvocationState(StrEnum):
    #: queued, not yet claimed (or returned to the queue for a retry)
    PENDING = "pending"
    #: claimed by a daemon
    RUNNING = "running"
    #: finished with a value
    SUCCEEDED = "succeeded"
    #: finished with an error after its last attempt
    FAILED = "failed"
    #: cancelled by a user
    CANCELLED = "cancelled"
    #: evicted from a full ``drop_oldest`` queue
    DROPPED = "dropped"


class Cause(StrEnum):
    """How a failed job's last attempt ended when it was not its code's error (``jobs ls
    --state`` takes these too)."""

    #: it ran past its ``timeout_s`` and was stopped
    TIMED_OUT = "timed_out"
    #: its process died instead of answering (a signal, or a worker process's exit)
    CRASHED = "crashed"


TERMINAL_STATES = frozenset(
    {
        InvocationState.SUCCEEDED,
        InvocationState.FAILED,
        InvocationState.CANCELLED,
        InvocationState.DROPPED,
    }
)

#: What a retry is for: a job that ended without its value (a timed-out run is failed).
RETRIED_STATES = frozenset(
    {InvocationState.FAILED, InvocationState.CANCELLED, InvocationState.DROPPED}
)


class EventType(StrEnum):
    #: admitted to the queue (control plane)
    SUBMITTED = "submitted"
    #: delivered to a daemon (daemon)
    CLAIMED = "claimed"
    #: the run began (daemon)
    STARTED = "started"
    #: the run returned (daemon); fenced by the Recorder
    SUCCEEDED = "succeeded"
    #: the last attempt failed (daemon); fenced by the Recorder
    FAILED = "failed"
    #: an attempt failed and the invocation goes back to the queue (daemon)
    RETRYING = "retrying"
    #: cancelled (control plane for pending, daemon for running)
    CANCELLED = "cancelled"
    #: a stop of the running attempt began: SIGTERM sent, its grace runs (daemon); it
    #: changes no state (the attempt still runs until its outcome comes)
    STOPPING = "stopping"
    #: evicted by ``drop_oldest`` (control plane)
    DROPPED = "dropped"
    #: a completion from a superseded attempt, recorded but not counted (Recorder)
    STALE = "stale"


class InvocationSubmit(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One invocation as a producer submits it: ``fn`` or ``command``, not both."""

    #: ``module:qualname`` of a function importable on the daemon
    fn: Annotated[str, Meta(max_length=MAX_FN)] | None = None
    #: JSON values, nested at most ``MAX_JSON_DEPTH`` deep (the whole invocation ≤ 1 MiB)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    #: argv of a subprocess to run instead of ``fn``
    command: Annotated[list[str], Meta(max_length=MAX_ARGV)] | None = None
    #: variables set for ``command``; the values reach only the daemon that runs it (no
    #: answer, event or log shows them: :mod:`lakeshore.model.redact`)
    env: Annotated[dict[EnvName, str], Meta(max_length=MAX_ENV)] = {}
    #: 0–9, higher first; priority queues only
    priority: Annotated[int, Meta(ge=0, le=9)] = 0
    #: a run longer than this is killed and counts as a failed attempt (seconds, ≤ 30 days)
    timeout_s: Annotated[float, Meta(gt=0, le=MAX_TIMEOUT_S)] | None = None
    max_attempts: Annotated[int, Meta(ge=1, le=100)] = 1
    #: a retried submit with the same key is the same invocation
    idempotency_key: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    #: the job this one retries: set by the retry route only (a producer's submit naming
    #: it is refused, so a link always means ``jobs retry`` made it)
    retry_of: str | None = None
    #: a stopped run (cancel, timeout, a daemon stopping) gets SIGTERM, then SIGKILL this
    #: many seconds later if it has not exited (0–3600; checked at admission, which names it)
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    #: a function's: ``process`` (default) or ``inline`` (a command always runs in its
    #: own process)
    isolation: Isolation = Isolation.PROCESS
    #: lost attempts in a row (its daemon died under each) after which the invocation
    #: fails as ``lost_too_often`` rather than run again (1–100; checked at admission)
    max_lost: int = DEFAULT_MAX_LOST
    #: the code snapshot it runs in (``sha256:…``, uploaded first: ``PUT …/code/DIGEST``):
    #: first on the worker's ``sys.path`` and its working directory; ``None``: the
    #: daemon's own path (spec/code.md)
    code: Digest | None = None
    #: what its run holds of its daemon's machine: GPUs, CPUs, memory (spec/resources.md);
    #: ``None``: no GPU, 1 CPU, memory not tracked
    resources: Resources | None = None

    __repr__ = redacted_repr
    __rich_repr__ = redacted_fields


class SubmitBatch(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    invocations: Annotated[list[InvocationSubmit], Meta(min_length=1, max_length=MAX_BATCH)]


class FastSubmit(Struct, frozen=True, kw_only=True):
    """The SDK's NATS fast path on ``ls.<ns>.submit.<queue>``: the same as the HTTP route."""

    token: str
    invocations: Annotated[list[InvocationSubmit], Meta(min_length=1, max_length=MAX_BATCH)]
    wait_s: Annotated[float, Meta(ge=0, le=600)] = 30.0


class FastResult(Struct, frozen=True, kw_only=True):
    """The SDK's NATS fast path on ``ls.<ns>.result.<id>``: the result route's long wait."""

    token: str
    wait_s: Annotated[float, Meta(ge=0, le=600)] = 0.0


class RetryRequest(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The retry route's body, optional: the ``env`` values of a command that had some
    (they are kept nowhere once its message is gone, :mod:`lakeshore.model.redact`)."""

    env: Annotated[dict[EnvName, str], Meta(max_length=MAX_ENV)] | None = None

    __repr__ = redacted_repr
    __rich_repr__ = redacted_fields


class SubmitAnswer(Struct, frozen=True, kw_only=True):
    """202: the ids in submission order; warnings such as ``no_members``."""

    ids: list[str]
    queue: str
    namespace: str
    warnings: list[str] = []
    #: ids that were already known (idempotent resubmits)
    duplicates: list[str] = []


class Invocation(Struct, frozen=True, kw_only=True):
    """The message stored on a queue stream (JSON), one per invocation."""

    id: str
    namespace: str
    queue: str
    fn: str | None = None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    command: list[str] | None = None
    #: the one place the ``env`` values are kept, for the daemon (:mod:`lakeshore.model.redact`)
    env: dict[str, str] = {}
    priority: int = 0
    timeout_s: float | None = None
    max_attempts: int = 1
    submitted_at: datetime
    #: seconds between SIGTERM and SIGKILL when the run is stopped
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    #: a function's: ``process`` (default) or ``inline`` (a command always runs in its
    #: own process)
    isolation: Isolation = Isolation.PROCESS
    #: lost attempts in a row (its daemon died under each) after which the invocation
    #: fails as ``lost_too_often`` rather than run again (1–100; checked at admission)
    max_lost: int = DEFAULT_MAX_LOST
    #: the code snapshot it runs in (spec/code.md); ``None``: the daemon's own path
    code: str | None = None
    #: what its run holds of its daemon's machine (spec/resources.md)
    resources: Resources | None = None
    #: the submit's: its idempotency key, the first id of a submit of several (``batch``),
    #: the job it retries — what the ``submitted`` record keeps, so that the message alone
    #: can make it (:mod:`lakeshore.submission`)
    idempotency_key: str | None = None
    batch: str | None = None
    retry_of: str | None = None

    __repr__ = redacted_repr
    __rich_repr__ = redacted_fields


class InvocationEvent(Struct, frozen=True, kw_only=True):
    """One lifecycle event; the row type of the ``invocation_events`` table."""

    namespace: str
    queue: str
    invocation_id: str
    ts: datetime
    type: EventType
    #: 1-based attempt number (= epoch); 0 before any claim
    attempt: int = 0
    worker: str | None = None
    #: JetStream delivery count of the claim this event belongs to
    epoch: int | None = None
    #: e.g. ``seq`` (stream sequence), ``error``, ``exit_code``, ``output``, ``stale_type``;
    #: a daemon's events carry ``run``, the id of the execution (one per claim it runs)
    detail: dict[str, Any] | None = None


class EventBatch(Struct, frozen=True, kw_only=True):
    """What is published on ``ls.<ns>.evt.<queue>``: events in the order they happened."""

    events: list[InvocationEvent]


class RemoteError(Struct, frozen=True, kw_only=True):
    #: the exception's qualified type, e.g. ``builtins.ValueError``
    type: str
    message: str
    traceback: str = ""


class Result(Struct, frozen=True, kw_only=True):
    """An attempt's result: in its outcome event's ``detail`` (:data:`RESULT_DETAIL`) when
    its JSON is at most :data:`INLINE_RESULT_BYTES`, else in the results KV bucket under
    ``<ns>.<id>.<epoch>``."""

    id: str
    ok: bool
    value: Any = None
    error: RemoteError | None = None
    worker: str | None = None
    epoch: int = 0
    exit_code: int | None = None
    #: bounded tail of a command's stdout (of its combined stdout and stderr when
    #: ``stderr`` is ``None``: a result stored before the two were kept apart)
    output: str | None = None
    #: bounded tail of a command's stderr
    stderr: str | None = None


#: A result whose JSON is at most this long travels in its outcome event (one JetStream write
#: per run fewer than a put in ``LS_RESULTS``). Bounded so that a batch of events stays far
#: below NATS's ``max_payload``.
INLINE_RESULT_BYTES = 1024
#: The key of an outcome event's ``detail`` that holds its result (see :class:`Result`).
RESULT_DETAIL = "result"


#: The events that end an invocation with a result (the ones that may carry it).
RESULT_EVENTS = frozenset({EventType.SUCCEEDED, EventType.FAILED})


def inline_result(detail: dict[str, Any] | None) -> Result | None:
    """The result an outcome event carries, or ``None`` (its result is in ``LS_RESULTS``)."""
    raw = detail.get(RESULT_DETAIL) if detail else None
    if raw is None:
        return None
    try:
        return msgspec.convert(raw, Result)
    except msgspec.ValidationError:
        return None


class Stopping(Struct, frozen=True, kw_only=True):
    """A stop of a running attempt under way: SIGTERM sent, the grace running."""

    #: why: ``cancel requested``, ``timed out after 2 s``, ``its daemon is stopping``
    why: str
    #: when SIGTERM was sent
    since: datetime
    #: seconds from SIGTERM to SIGKILL
    grace_s: float


class Attempt(Struct, frozen=True, kw_only=True):
    """One execution of an invocation: one claim a daemon ran."""

    #: the execution's number: its epoch, or one more than the attempt before it when that
    #: one had the same epoch (or a later one), so that every execution has its own number
    attempt: int
    worker: str | None
    #: attempt token: stream sequence and epoch
    seq: int | None
    #: the JetStream delivery count of the claim (two executions share one after an
    #: unconfirmed ack, or a delivery count restarted by a server crash)
    epoch: int | None
    #: when its daemon took the delivery (a redelivery's moment), before the run began
    claimed_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    #: succeeded | failed | retrying | timed_out | crashed | cancelled | stale | running |
    #: preempted | lost: ``timed_out`` — it ran past ``timeout_s`` and was stopped;
    #: ``crashed`` — its process died instead of answering (:attr:`signal` says how);
    #: ``retrying`` / ``failed`` — its code's error (retried / the last); these count
    #: toward ``max_attempts``. ``preempted`` — its daemon stopped or retired and
    #: interrupted it; ``lost`` — its daemon died under it: neither counts
    outcome: str
    #: crashed: the signal that killed its process (``SIGSEGV``), or ``exit N``
    signal: str | None = None
    #: timed out: whether SIGKILL was needed (the run outlived its SIGTERM grace)
    killed: bool | None = None
    #: another execution of the same epoch came first (by another daemon, or by this one
    #: after a restarted delivery count): at most one of them has its completion accepted,
    #: the other's is ``stale``
    duplicate: bool = False
    #: why this execution failed (its ``retrying``, ``failed`` or ``cancelled`` event's)
    error: RemoteError | None = None
    #: the worker's name, while its row exists
    worker_name: str | None = None
    #: its stop, once SIGTERM was sent (kept after it ended)
    stopping: Stopping | None = None
    #: cancelled: who asked (the cancelling token's name)
    cancelled_by: str | None = None
    #: the claim's place in its daemon process's claims (``[boot, n]``): a heartbeat of
    #: that daemon at or past it that does not list the job means the daemon let it go
    claim_mark: ClaimMark | None = None
    #: the code snapshot it ran in (``sha256:…``); ``None``: the daemon's own path
    code: str | None = None


class Job(Struct, frozen=True, kw_only=True):
    """An invocation as ``jobs ls`` shows it."""

    id: str
    namespace: str
    queue: str
    state: InvocationState
    fn: str | None = None
    command: list[str] | None = None
    priority: int = 0
    attempt: int = 0
    max_attempts: int = 1
    worker: str | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: pending only: no_members, all_members_busy, scaling_up, pool_at_max, steal_delay,
    #: draining, archived, queued; for a request of resources no_daemon_fits or
    #: waiting_for_resources, each followed by ``: `` and the numbers
    pending_reason: str | None = None
    #: pending only: how many pending invocations of the queue are ahead of this one
    position: int | None = None
    error: RemoteError | None = None
    #: failed only: its last attempt ran past its timeout, or its process crashed
    cause: Cause | None = None
    #: the name of ``worker`` (which is the worker's id), while the worker row exists
    worker_name: str | None = None
    #: the submit of several invocations this one came in: the first one's id (``None``
    #: for a submit of one)
    batch: str | None = None
    #: the job this one is a retry of (``jobs retry``)
    retry_of: str | None = None
    #: what its run holds of its daemon's machine (spec/resources.md); ``None``: nothing
    #: asked beyond the defaults
    resources: Resources | None = None


class JobDetail(Job, frozen=True, kw_only=True):
    attempts: list[Attempt] = []
    stale: int = 0
    #: the retries of this job, oldest first
    retried_by: list[str] = []
    #: attempts that count toward ``max_attempts``: those that failed (an error, a timeout,
    #: a crash) or succeeded; not the preempted or lost ones
    counted_attempts: int = 0
    #: running only, while its attempt's stop runs: "cancel requested; SIGTERM sent 4 s
    #: ago, SIGKILL in 6 s"
    stopping: str | None = None
    #: cancelled only: who asked (the cancelling token's name)
    cancelled_by: str | None = None
    #: a function's: ``process`` (a worker process of its daemon) or ``inline`` (a thread
    #: of the daemon: no run variables, no live log, no re-import, no isolation)
    isolation: str | None = None
    #: the code snapshot it runs in (``sha256:…``; spec/code.md); ``None``: none shipped
    code: str | None = None


class BatchTally(Struct, frozen=True, kw_only=True):
    """How the invocations of one submit stand: ``jobs ls`` sums a batch up with it."""

    #: the batch's id (its first invocation's)
    id: str
    #: how many invocations it has
    size: int
    #: how many are in each state (only the states some are in)
    states: dict[str, int]


class JobList(Struct, frozen=True):
    """A page of ``GET …/jobs``: jobs newest first, and the batches they came in."""

    jobs: list[Job]
    #: the batches the listed jobs came in, each counted whole
    batches: list[BatchTally] = []
