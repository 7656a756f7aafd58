"""Work-stealing: lending idle daemons to queues whose backlog has waited too long.

A queue may steal when its ``steal_delay_s`` is set, its oldest pending invocation has
waited at least that long, and none of its members is idle (an idle member would take
the work itself). Candidates are idle daemons of the same namespace whose labels satisfy
the queue's ``match`` and, for a queue in a pool, that belong to the pool (carry its
``lakeshore.io/pool`` label or serve one of its members).

Open points of the spec, decided here:

* a queue is lent as many daemons as its pending backlog sizes for,
  ``ceil(pending / target_pending)``, less the live leases it already has;
* the most starved queue (oldest pending first) picks first, and the longest idle daemon
  is lent first, since it is the next to be retired for idleness;
* ``archived`` and ``paused`` queues do not steal; ``draining`` ones do, to finish sooner.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import timedelta

from lakeshore.controller.decisions import GrantSteal
from lakeshore.controller.fleet import Fleet, satisfies
from lakeshore.controller.snapshot import POOL_LABEL, ControllerSettings, QueueLoad, Snapshot
from lakeshore.model import DEFAULT_QUEUE, Queue, QueueState, Worker

_STEALING_STATES = frozenset({QueueState.ACTIVE, QueueState.DRAINING})


def grant_steals(
    snapshot: Snapshot,
    settings: ControllerSettings,
    fleet: Fleet,
    pool_members: Mapping[tuple[str, str], Collection[str]],
) -> list[GrantSteal]:
    """Grant this tick's steal leases.

    A daemon holding a live lease is granted no other; each granted daemon gets one lease,
    lasting ``steal_lease_ticks * tick_s`` seconds from ``now``.

    Args:
        snapshot: the tick's snapshot.
        settings: the controller's settings.
        fleet: the snapshot's workers, indexed.
        pool_members: member queue names per ``(namespace, pool)``.

    Returns:
        The grants, most starved queue first.
    """
    now = snapshot.now
    until = now + timedelta(seconds=settings.steal_lease_ticks * settings.tick_s)
    eligible: list[tuple[Queue, QueueLoad, float]] = []
    for q in snapshot.queues:
        delay = q.elasticity.steal_delay_s
        if delay is None or q.state not in _STEALING_STATES:
            continue
        load = snapshot.load(q.namespace, q.name)
        age = load.oldest_pending_age_s
        if load.pending == 0 or age is None or age < delay:
            continue
        if (q.namespace, q.name) in fleet.idle_member:
            continue
        eligible.append((q, load, age))
    eligible.sort(key=lambda x: (-x[2], x[0].namespace, x[0].name))

    taken = set(fleet.leases)
    candidates = _candidates(fleet, pool_members) if eligible else {}
    grants: list[GrantSteal] = []
    for q, load, age in eligible:
        e = q.elasticity
        held = fleet.held[q.namespace, q.name]
        sized = -(-load.pending // e.target_pending)
        wanted = sized - held
        for w in candidates.get((q.namespace, e.pool), ()):
            if wanted <= 0:
                break
            if w.id in taken or not satisfies(w.labels, e.match):
                continue
            taken.add(w.id)
            wanted -= 1
            grants.append(
                GrantSteal(
                    namespace=q.namespace,
                    worker_id=w.id,
                    queue=q.name,
                    until=until,
                    reason=(
                        f"oldest pending {age:g}s ≥ steal_delay_s {e.steal_delay_s:g}s and "
                        f"no idle member: lend {w.name} for {settings.steal_lease_ticks} "
                        f"ticks (pending {load.pending} sizes {sized}, {held} already lent)"
                    ),
                    inputs={
                        "pending": load.pending,
                        "oldest_pending_age_s": age,
                        "steal_delay_s": e.steal_delay_s,
                        "target_pending": e.target_pending,
                        "held": held,
                        "pool": e.pool,
                        "match": dict(e.match),
                        "worker_labels": dict(w.labels),
                        "lease_s": settings.steal_lease_ticks * settings.tick_s,
                    },
                )
            )
    return grants


def _candidates(
    fleet: Fleet, pool_members: Mapping[tuple[str, str], Collection[str]]
) -> dict[tuple[str, str | None], list[Worker]]:
    """Idle daemons, longest idle first, per ``(namespace, pool)``; pool None: all of them.

    Indexed once per tick so that each stealing queue scans only its own candidates.
    """
    pool_of = {(ns, q): pool for (ns, pool), names in pool_members.items() for q in names}
    out: dict[tuple[str, str | None], list[Worker]] = {}
    for ns, idle in fleet.idle.items():
        out[ns, None] = idle
        for w in idle:
            # A daemon of the pool carries its label or serves one of its members.
            pools = {p for q in w.queues or [DEFAULT_QUEUE] if (p := pool_of.get((ns, q)))}
            if label := w.labels.get(POOL_LABEL):
                pools.add(label)
            for pool in pools:
                out.setdefault((ns, pool), []).append(w)
    return out
