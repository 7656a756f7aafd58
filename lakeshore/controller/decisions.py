"""What a tick decides, and why.

Decisions are a tagged union so the actor can ``match`` on them and record each one as a
queue event (``scaled_up``, ``scaled_down``, ``steal_granted``, ``daemon_lost``). Every
decision carries ``inputs`` — the numbers it was computed from, JSON-encodable — and a
one-line ``reason`` a person can check against them, so a recorded event can be
recomputed and explained without the snapshot.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from msgspec import Struct

from lakeshore.controller.snapshot import QueueLoad
from lakeshore.model import Queue, Scope


class Launch(Struct, frozen=True, kw_only=True, tag="launch"):
    """Start ``count`` managed daemons on ``provider``."""

    namespace: str
    #: the queue whose share the daemons fill (for a pool: the member they were launched for)
    queue: str
    #: the pool the daemons belong to; None: a queue's own daemons
    pool: str | None = None
    count: int
    provider: str
    #: the daemons' membership (``[]`` is the default queue)
    queues: list[str]
    #: the daemons' labels, ownership labels included
    labels: dict[str, str]
    #: ids of managed daemons found lost this tick that part of ``count`` replaces
    replaces: list[str] = []
    reason: str
    inputs: dict[str, Any]


class Retire(Struct, frozen=True, kw_only=True, tag="retire"):
    """Retire an idle managed daemon: it finishes what it holds, then exits."""

    namespace: str
    worker_id: str
    #: the queue the daemon was launched for (its ``lakeshore.io/queue`` label)
    queue: str | None = None
    pool: str | None = None
    reason: str
    inputs: dict[str, Any]


class GrantSteal(Struct, frozen=True, kw_only=True, tag="steal"):
    """Lease ``worker_id`` to pull from ``queue`` after its own queues, until ``until``."""

    namespace: str
    worker_id: str
    queue: str
    until: datetime
    reason: str
    inputs: dict[str, Any]


class MarkLost(Struct, frozen=True, kw_only=True, tag="lost"):
    """Mark a worker lost: no heartbeat for longer than ``lost_after_s``."""

    namespace: str
    worker_id: str
    reason: str
    inputs: dict[str, Any]


Decision = Launch | Retire | GrantSteal | MarkLost


class Explanation(Struct, frozen=True, kw_only=True):
    """One row of ``controller status``: a scaling unit's target and where it stands."""

    namespace: str
    scope: Scope
    #: the queue's or the pool's name
    name: str
    #: managed daemons wanted (for a pool member: its share of the pool)
    desired: int
    #: managed daemons up (starting, idle or busy; not retiring, lost or stopped)
    actual: int
    #: launches in flight, before this tick's
    launching: int
    reason: str
    #: for a queue in a pool, the pool's name
    pool: str | None = None


class TickResult(Struct, frozen=True, kw_only=True):
    """A tick's output, in a deterministic order.

    ``decisions`` are ordered by kind — :class:`MarkLost`, :class:`Retire`,
    :class:`GrantSteal`, :class:`Launch` — and then by namespace and name; retirements go
    by the highest ``cost_weight`` queue first. ``explanations`` are sorted by namespace,
    scope and name.
    """

    decisions: list[Decision]
    explanations: list[Explanation]


def scaling_inputs(
    q: Queue, load: QueueLoad, hand: int, want: int, up: int, flying: int, lent: int
) -> dict[str, Any]:
    """The numbers a scaling decision for ``q`` is computed from (JSON-encodable).

    Args:
        q: the queue row.
        load: its backlog.
        hand: hand-launched daemons serving it.
        want: its desired managed daemons (for a pool member: its share).
        up: its managed daemons up.
        flying: its launches in flight.
        lent: daemons lent to it by live or just-granted steal leases.
    """
    e = q.elasticity
    return {
        "kind": e.kind.value,
        "state": q.state.value,
        "pending": load.pending,
        "running": load.running,
        "oldest_pending_age_s": load.oldest_pending_age_s,
        "target_pending": e.target_pending,
        "min": e.min,
        "max": e.max,
        "burst_after_s": e.burst_after_s,
        "scale_down_idle_s": e.scale_down_idle_s,
        "hand": hand,
        "desired": want,
        "up": up,
        "launching": flying,
        "lent": lent,
    }


def verdict(up: int, flying: int, lent: int, launch: int, retire: int) -> str:
    """The tail of a scaling reason: what the unit has, and what the tick does about it."""
    have = f"{up} up, {flying} launching" + (f", {lent} lent by steal" if lent else "")
    action = f"launch {launch}" if launch else f"retire {retire}" if retire else "hold"
    return f"{have} → {action}"
