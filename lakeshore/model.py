"""Every type that crosses a process boundary: rows, HTTP bodies and bus messages.

Wire types evolve by adding defaulted fields at the end. Request bodies (``*Create``,
``*Patch``, ``*Edit``) forbid unknown fields so that a typo is a 400, not a silent no-op.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from lakeshore.errors import InvalidName

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
NAME_MAX = 63
_NAME_RE = re.compile(NAME_PATTERN)

#: The reserved queue every namespace has without creating it.
DEFAULT_QUEUE = "default"
DEFAULT_QUEUE_DESCRIPTION = "Default queue (auto-created). Cannot be archived or deleted."
#: Priority levels of a ``priority`` queue: p0 … p9, 9 highest. ``fifo`` queues use p0 only.
PRIORITY_LEVELS = 10


def validate_name(what: str, value: str) -> str:
    """Check a queue, namespace, org or pool name at the edge.

    Names become NATS subject tokens and stream names, so they are restricted to
    ``^[a-z0-9][a-z0-9-]*$`` and at most 63 characters.

    Raises:
        InvalidName: with what was wrong and the rule to follow.
    """
    if not value:
        raise InvalidName(what, value, "it is empty")
    if len(value) > NAME_MAX:
        raise InvalidName(what, value, f"it has {len(value)} characters, at most {NAME_MAX}")
    if not _NAME_RE.match(value):
        raise InvalidName(
            what, value, f"use lowercase letters, digits and '-', starting with a letter "
            f"or digit ({NAME_PATTERN})"
        )
    return value


def now() -> datetime:
    return datetime.now(UTC)


class QueueKind(StrEnum):
    #: one priority level, first in first out
    FIFO = "fifo"
    #: ten levels p0..p9, the highest non-empty level is claimed first
    PRIORITY = "priority"


class QueueState(StrEnum):
    #: admits and serves work
    ACTIVE = "active"
    #: admits nothing new; in-flight and queued work finishes
    DRAINING = "draining"
    #: soft-deleted: the row is kept, nothing is admitted
    ARCHIVED = "archived"
    #: declared by the schema; no route can set it
    PAUSED = "paused"


class OnFull(StrEnum):
    #: a submit to a full queue answers 429
    REJECT = "reject"
    #: the oldest pending invocation is dropped to make room
    DROP_OLDEST = "drop_oldest"
    #: the submit waits, up to its timeout, for room
    BLOCK = "block"


class ElasticityKind(StrEnum):
    #: the controller launches and retires nothing
    FIXED = "fixed"
    #: between min (>= 1) and max managed daemons, sized to the backlog
    ELASTIC = "elastic"
    #: hand-launched baseline plus managed daemons once the backlog waits too long
    BURST = "burst"
    #: like elastic, but scales to zero when idle
    FULLY_ELASTIC = "fully_elastic"


class WorkerStatus(StrEnum):
    #: launched, not yet heartbeating
    STARTING = "starting"
    #: heartbeating, nothing running
    IDLE = "idle"
    #: running an invocation
    BUSY = "busy"
    #: no heartbeat for lost_after_s
    LOST = "lost"
    #: finishing its current invocation, then exiting
    RETIRING = "retiring"
    #: exited
    STOPPED = "stopped"


NonNegInt = Annotated[int, Meta(ge=0)]
NonNegFloat = Annotated[float, Meta(ge=0)]
Name = Annotated[str, Meta(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]


class Elasticity(Struct, frozen=True, kw_only=True):
    """How the controller sizes a queue's fleet (see spec/elasticity.md)."""

    kind: ElasticityKind = ElasticityKind.FIXED
    #: the fewest controller-managed daemons
    min: NonNegInt = 0
    #: the most controller-managed daemons
    max: NonNegInt = 0
    #: where the controller launches daemons
    provider: Name = "local"
    #: pending+running invocations one daemon is sized for
    target_pending: Annotated[int, Meta(ge=1)] = 4
    #: a managed daemon idle this long may be retired
    scale_down_idle_s: NonNegFloat = 60.0
    #: burst: oldest pending age that triggers bursting
    burst_after_s: NonNegFloat = 30.0
    #: queues with the same pool share one fleet
    pool: Name | None = None
    #: label -> value a daemon must carry to serve or steal this queue's work
    match: dict[str, str] = {}
    #: pending this long may be stolen by an idle pool member; null: no stealing
    steal_delay_s: NonNegFloat | None = None
    #: the queue's weight when a pool's capacity is short
    cost_weight: Annotated[float, Meta(gt=0)] = 1.0


class Queue(Struct, frozen=True, kw_only=True):
    """A queue row."""

    name: str
    namespace: str
    kind: QueueKind = QueueKind.FIFO
    state: QueueState = QueueState.ACTIVE
    description: str = ""
    #: most invocations not yet finished (queued + in flight); null: unbounded
    max_depth: int | None = None
    on_full: OnFull = OnFull.REJECT
    elasticity: Elasticity = Elasticity()
    created_at: datetime
    updated_at: datetime


class Member(Struct, frozen=True, kw_only=True):
    """A worker pulling from a queue right now, as shown by ``queues show``."""

    id: str
    name: str
    status: WorkerStatus
    queues: list[str]
    current: str | None = None
    last_heartbeat: datetime | None = None


class QueueDetail(Queue, frozen=True, kw_only=True):
    """A queue row with the workers pulling from it."""

    members: list[Member] = []


class QueueStats(Struct, frozen=True, kw_only=True):
    namespace: str
    queue: str
    #: workers pulling from the queue (not lost, not stopped)
    daemon_count: int
    #: members running an invocation
    busy: int
    #: busy / daemon_count (0 with no daemons)
    utilization: float
    #: invocations queued and not yet delivered
    pending: int
    #: invocations delivered and not yet acknowledged
    running: int
    #: messages stored in the queue's stream (pending + running + undeliverable leftovers)
    depth: int
    state: QueueState
    max_depth: int | None = None


class QueueEvent(Struct, frozen=True, kw_only=True):
    """One recorded change of a queue: a mutation or a controller decision."""

    id: int
    namespace: str
    queue: str
    ts: datetime
    type: str
    #: the id of the token that made the change (null: the system)
    actor: str | None = None
    #: only with ``verbose=true``: before / after and other inputs
    detail: dict[str, Any] | None = None


class Worker(Struct, frozen=True, kw_only=True):
    """A daemon's row. ``queues == []`` is the default queue."""

    id: str
    name: str
    namespace: str
    queues: list[str] = []
    labels: dict[str, str] = {}
    provider: str = "external"
    managed: bool = False
    status: WorkerStatus = WorkerStatus.STARTING
    current: str | None = None
    last_heartbeat: datetime | None = None
    started_at: datetime


class Namespace(Struct, frozen=True, kw_only=True):
    name: str
    org: str
    created_at: datetime


class Token(Struct, frozen=True, kw_only=True):
    """A token as listed: its hash is never shown."""

    id: str
    #: the namespace it was issued for; null for the admin token
    namespace: str | None
    description: str = ""
    #: admin tokens authorise every namespace of every org
    admin: bool = False
    created_at: datetime


class TokenCreated(Token, frozen=True, kw_only=True):
    """Answer to a token creation: the only time the secret is shown."""

    token: str


class ErrorDetail(Struct, frozen=True):
    code: str
    message: str


class ErrorBody(Struct, frozen=True):
    error: ErrorDetail


# ---- request bodies -------------------------------------------------------------------


class QueueCreate(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    kind: QueueKind = QueueKind.FIFO
    description: str = ""
    max_depth: Annotated[int, Meta(ge=1)] | None = None
    on_full: OnFull = OnFull.REJECT
    #: partial elasticity object: omitted fields take their defaults for the kind
    elasticity: dict[str, Any] | None = None


class QueuePatch(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    description: str | UnsetType = UNSET
    max_depth: Annotated[int, Meta(ge=1)] | None | UnsetType = UNSET
    on_full: OnFull | UnsetType = UNSET
    #: merged into the current elasticity object (its kind may change)
    elasticity: dict[str, Any] | UnsetType = UNSET
    #: present only to answer a clear 400: a queue's kind is immutable
    kind: Any = UNSET
    name: Any = UNSET


class MembershipEdit(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    add: list[str] = []
    remove: list[str] = []


class NamespaceCreate(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    #: defaults to the org of the calling token (``default`` for the admin token)
    org: str | None = None


class TokenCreate(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    description: str = ""


class WorkerRegister(Struct, frozen=True, kw_only=True):
    """A daemon announcing itself (launched daemons carry the id they were given)."""

    namespace: str
    name: str
    id: str | None = None
    queues: list[str] = []
    labels: dict[str, str] = {}
    provider: str = "external"
    managed: bool = False
