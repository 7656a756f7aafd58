"""Queue rows, their elasticity object, stats, events and request bodies."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from msgspec import UNSET, Meta, Struct, UnsetType

from lakeshore.model.code import Digest
from lakeshore.model.names import (
    MAX_COST_WEIGHT,
    MAX_FLEET,
    MAX_TARGET_PENDING,
    PRIORITY_LEVELS,
    Delay,
    Depth,
    Labels,
    Name,
    Text,
)
from lakeshore.model.resources import Resources
from lakeshore.model.workers import Member

#: A fleet size (``elasticity.min`` / ``max``).
FleetSize = Annotated[int, Meta(ge=0, le=MAX_FLEET)]


class QueueKind(StrEnum):
    #: one priority level, first in first out
    FIFO = "fifo"
    #: ten levels p0..p9, the highest non-empty level is claimed first
    PRIORITY = "priority"


def levels_of(kind: QueueKind) -> int:
    """How many priority levels (streams' subjects and consumers) a queue of ``kind`` has."""
    return PRIORITY_LEVELS if kind is QueueKind.PRIORITY else 1


class QueueState(StrEnum):
    #: admits and serves work
    ACTIVE = "active"
    #: admits nothing new; in-flight and queued work finishes
    DRAINING = "draining"
    #: soft-deleted: the row is kept, nothing is admitted
    ARCHIVED = "archived"
    #: declared by the schema; no route can set it
    PAUSED = "paused"


#: States of a queue that admits nothing new: its submits are refused (409) and its stream
#: takes no publish (``Bus.ensure_queue(admitting=False)``).
CLOSED_STATES = frozenset({QueueState.DRAINING, QueueState.ARCHIVED})


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


class Elasticity(Struct, frozen=True, kw_only=True):
    """How the controller sizes a queue's fleet (see spec/elasticity.md)."""

    kind: ElasticityKind = ElasticityKind.FIXED
    #: the fewest controller-managed daemons
    min: FleetSize = 0
    #: the most controller-managed daemons
    max: FleetSize = 0
    #: where the controller launches daemons
    provider: Name = "local"
    #: pending+running invocations one daemon is sized for
    target_pending: Annotated[int, Meta(ge=1, le=MAX_TARGET_PENDING)] = 4
    #: a managed daemon idle this long may be retired
    scale_down_idle_s: Delay = 60.0
    #: burst: oldest pending age that triggers bursting
    burst_after_s: Delay = 30.0
    #: queues with the same pool share one fleet
    pool: Name | None = None
    #: label -> value a daemon must carry to serve or steal this queue's work
    match: Labels = {}
    #: pending this long may be stolen by an idle pool member; null: no stealing
    steal_delay_s: Delay | None = None
    #: the queue's weight when a pool's capacity is short
    cost_weight: Annotated[float, Meta(gt=0, le=MAX_COST_WEIGHT)] = 1.0


class QueueDefaults(
    Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """What a queue's invocations get when they name none of their own."""

    #: the resources each run holds (an invocation's own ``resources`` replace them whole)
    resources: Resources | None = None


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
    #: free labels, e.g. ``lakeshore.io/project`` on the queues a compose file created
    labels: dict[str, str] = {}
    #: the code snapshot (``sha256:…``) its invocations run in when they name none
    #: (spec/code.md; a compose file's ``code:``); ``None``: the daemon's own path
    code: str | None = None
    #: what its invocations get when they name none (``resources``: spec/resources.md)
    defaults: QueueDefaults | None = None


class QueuePage(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A page of the queue list (``GET …/queues?limit=&after=``)."""

    queues: list[Queue]
    #: the ``after`` of the next page; absent (``None``) on the last page
    next: str | None = None


class QueueDetail(Queue, frozen=True, kw_only=True):
    """A queue row with the workers pulling from it."""

    members: list[Member] = []


class QueueStats(Struct, frozen=True, kw_only=True):
    namespace: str
    queue: str
    #: workers pulling from the queue (not lost, not stopped)
    daemon_count: int
    #: members running an invocation: busy by their last heartbeat, and never more than
    #: ``running`` (a heartbeat lags the acknowledgement of the run it reports)
    busy: int
    #: busy / daemon_count (0 with no daemons), to 4 decimals
    utilization: float
    #: invocations queued and not yet delivered
    pending: int
    #: invocations delivered and not yet acknowledged
    running: int
    #: messages stored in the queue's stream (pending + running + undeliverable leftovers)
    depth: int
    state: QueueState
    max_depth: int | None = None
    #: seconds since the oldest pending invocation was submitted (null: none pending); every
    #: time here is rounded to the microsecond
    oldest_pending_age_s: float | None = None
    #: invocations submitted in the last 5 minutes
    submitted: int = 0
    #: invocations that succeeded in the last 5 minutes
    succeeded: int = 0
    #: invocations that failed (no attempts left) in the last 5 minutes
    failed: int = 0
    #: median wait, submitted → first started, of invocations started in the last 5 minutes
    wait_p50_s: float | None = None
    #: 95th percentile of the same wait (seconds)
    wait_p95_s: float | None = None
    #: submits waiting for room in a full ``block`` queue now
    waiting_submits: int = 0
    #: invocations cancelled in the last 5 minutes
    cancelled: int = 0


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


class QueueCreate(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    kind: QueueKind = QueueKind.FIFO
    description: Text = ""
    max_depth: Depth | None = None
    on_full: OnFull = OnFull.REJECT
    #: partial elasticity object: omitted fields take their defaults for the kind
    elasticity: dict[str, Any] | None = None
    labels: Labels = {}
    #: the code snapshot its invocations run in when they name none (uploaded first)
    code: Digest | None = None
    #: what its invocations get when they name none
    defaults: QueueDefaults | None = None


class QueuePatch(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    description: Text | UnsetType = UNSET
    max_depth: Depth | None | UnsetType = UNSET
    on_full: OnFull | UnsetType = UNSET
    #: merged into the current elasticity object (its kind may change)
    elasticity: dict[str, Any] | UnsetType = UNSET
    #: replaces the queue's labels
    labels: Labels | UnsetType = UNSET
    #: the code snapshot its invocations run in when they name none; ``null``: none
    code: Digest | None | UnsetType = UNSET
    #: replaces what its invocations get when they name none; ``null``: nothing
    defaults: QueueDefaults | None | UnsetType = UNSET
    #: present only to answer a clear 400: a queue's kind is immutable
    kind: Any = UNSET
    name: Any = UNSET
