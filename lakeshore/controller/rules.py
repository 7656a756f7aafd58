"""The rule book: one controller tick as a pure function of a snapshot.

:func:`tick` applies spec/elasticity.md's rules in this order:

1. **Lost daemons** first: a worker found lost is no longer counted anywhere below, so
   its replacement falls out of the scale-up of the unit that still wants it.
2. **Stealing** before launching: this tick's grants, with the leases still live, count
   as daemons of the queue they were lent to, so the same backlog is not launched for.
3. **Per unit** (each queue in no pool, then each pool): state first (archived,
   draining), then the policy's ``desired``, then the pool's capped fair shares; then
   scale up to ``desired`` and scale down the idle surplus.
4. **Orphans**: managed daemons whose queue or pool no longer exists (deleted, or moved
   into or out of a pool) are retired once idle.

The output is sorted (see :class:`~lakeshore.controller.decisions.TickResult`), so equal
snapshots give equal results.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from lakeshore.controller.decisions import (
    Decision,
    Explanation,
    GrantSteal,
    Launch,
    Retire,
    TickResult,
)
from lakeshore.controller.fleet import Fleet
from lakeshore.controller.scaling import Planner
from lakeshore.controller.snapshot import ControllerSettings, Snapshot
from lakeshore.controller.stealing import grant_steals
from lakeshore.model import Queue, QueueState

_DEFAULT_SETTINGS = ControllerSettings()


def tick(snapshot: Snapshot, settings: ControllerSettings = _DEFAULT_SETTINGS) -> TickResult:
    """Decide one tick: what to launch, retire, lend and mark lost, and why.

    Pure: reads only its arguments (time is ``snapshot.now``) and has no side effects; the
    ControllerActor applies and records the decisions.

    Args:
        snapshot: queue rows, worker rows, loads, launches in flight, leases, at ``now``.
        settings: the controller's settings (tick period, surge, lost threshold, lease).

    Returns:
        The decisions and one explanation row per queue and per pool, in sorted order.
    """
    fleet = Fleet(snapshot, settings)
    alone: list[Queue] = []
    pools: dict[tuple[str, str], list[Queue]] = defaultdict(list)
    for q in snapshot.queues:
        if q.elasticity.pool is None:
            alone.append(q)
        else:
            pools[q.namespace, q.elasticity.pool].append(q)
    # An archived member is no longer served, so no daemon is lent to a pool on its behalf.
    pool_members = {
        key: {q.name for q in qs if q.state is not QueueState.ARCHIVED} for key, qs in pools.items()
    }

    grants = grant_steals(snapshot, settings, fleet, pool_members)
    lent: Counter[tuple[str, str]] = fleet.held.copy()
    lent.update((g.namespace, g.queue) for g in grants)
    keep = set(fleet.leases) | {g.worker_id for g in grants}

    planner = Planner(snapshot, settings, fleet, lent, keep)
    for q in sorted(alone, key=lambda q: (q.namespace, q.name)):
        planner.scale_queue(q)
    for (ns, pool), members in sorted(pools.items()):
        planner.scale_pool(ns, pool, members)
    planner.retire_orphans()

    retires: list[Retire] = [r for _, r in sorted(planner.retires, key=lambda kr: kr[0])]
    steals: list[GrantSteal] = sorted(grants, key=lambda g: (g.namespace, g.queue, g.worker_id))
    launches: list[Launch] = sorted(
        planner.launches, key=lambda x: (x.namespace, x.pool or "", x.queue)
    )
    decisions: list[Decision] = [*fleet.mark_lost(settings), *retires, *steals, *launches]
    explanations: list[Explanation] = sorted(
        planner.explanations, key=lambda e: (e.namespace, e.scope, e.name)
    )
    return TickResult(decisions=decisions, explanations=explanations)
