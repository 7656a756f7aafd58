"""What ``lakeshore controller status`` and ``pending_reason`` read of the last tick.

The ControllerActor keeps the last tick's :class:`~lakeshore.model.UnitStatus` rows (one
per queue and per pool, built from the rule book's explanations) and the live steal
leases; the route answers them as a :class:`~lakeshore.model.ControllerStatus`.
:func:`pending_hint` turns the same rows into the controller's part of a pending job's
``pending_reason``.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from lakeshore.controller.decisions import Explanation
from lakeshore.controller.pools import pool_cap
from lakeshore.controller.snapshot import QueueKey, QueueLoad
from lakeshore.model import (
    DEFAULT_QUEUE,
    ElasticityKind,
    Queue,
    QueueState,
    Worker,
    WorkerStatus,
)
from lakeshore.model.controller import Scope, UnitStatus

#: ``(namespace, scope, name)`` of a status row.
UnitKey = tuple[str, Scope, str]
#: Daemons counted as up in ``total`` (as in ``actual``).
_LIVE = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})


def policy_of(q: Queue) -> str:
    """A queue's policy in a few words (``fixed``, ``burst 0..4``, ``archived``)."""
    e = q.elasticity
    text = e.kind.value if e.kind is ElasticityKind.FIXED else f"{e.kind.value} {e.min}..{e.max}"
    return text if q.state is QueueState.ACTIVE else f"{text} ({q.state.value})"


def unit_rows(
    explanations: Iterable[Explanation],
    queues: Mapping[QueueKey, Queue],
    launched: Counter[QueueKey],
    errors: Mapping[UnitKey, str],
    workers: Iterable[Worker] = (),
) -> dict[UnitKey, UnitStatus]:
    """Status rows from a tick's explanations.

    Args:
        explanations: the tick's explanations.
        queues: the snapshot's queue rows by ``(namespace, name)``.
        launched: daemons this tick launched, per ``(namespace, queue)`` launched for.
        errors: the latest apply failure per unit, if any.
        workers: the snapshot's worker rows, for each row's ``total``: the daemons up
            (idle or busy) whose membership serves the queue, or for a pool any of its
            member queues, hand-launched ones included.

    Returns:
        The rows by ``(namespace, scope, name)``.
    """
    # Who serves each queue, built once: a row's total is then a union of a few sets, not
    # a scan of every worker (1k queues x 1k workers would block the loop for a while).
    serving: dict[tuple[str, str], set[str]] = {}
    for w in workers:
        if w.status in _LIVE:
            for name in w.queues or [DEFAULT_QUEUE]:
                serving.setdefault((w.namespace, name), set()).add(w.id)
    members: dict[tuple[str, str], list[Queue]] = {}
    for q in queues.values():
        if q.elasticity.pool is not None and q.state is not QueueState.ARCHIVED:
            members.setdefault((q.namespace, q.elasticity.pool), []).append(q)
    pool_launched: Counter[tuple[str, str]] = Counter()
    for (ns, name), n in launched.items():
        q = queues.get((ns, name))
        if q is not None and q.elasticity.pool is not None:
            pool_launched[ns, q.elasticity.pool] += n
    rows: dict[UnitKey, UnitStatus] = {}
    for e in explanations:
        key: UnitKey = (e.namespace, e.scope, e.name)
        if e.scope is Scope.POOL:
            pool = members.get((e.namespace, e.name), [])
            served, cap = [q.name for q in pool], pool_cap(pool)
            policy, fresh = f"pool max {cap}", pool_launched[e.namespace, e.name]
        else:
            q = queues[e.namespace, e.name]
            served = [q.name]
            cap, policy, fresh = q.elasticity.max, policy_of(q), launched[e.namespace, e.name]
        rows[key] = UnitStatus(
            namespace=e.namespace,
            scope=e.scope,
            name=e.name,
            pool=e.pool,
            policy=policy,
            max=cap,
            desired=e.desired,
            actual=e.actual,
            launching=e.launching + fresh,
            reason=e.reason,
            error=errors.get(key),
            total=len(set().union(*(serving.get((e.namespace, n), ()) for n in served))),
        )
    return rows


def pending_hint(
    rows: Mapping[UnitKey, UnitStatus], queue: Queue | None, load: QueueLoad | None
) -> str | None:
    """The controller's reason a queue's pending work waits, if it has one.

    Asked only when no member of the queue can take the work now (none, or all busy).

    Returns:
        ``scaling_up`` when daemons are being launched for the queue (or its pool);
        ``pool_at_max`` when its pool has every daemon its cap allows;
        ``steal_delay`` when the queue may steal but its oldest pending invocation has not
        waited ``steal_delay_s`` yet; otherwise ``None``.
    """
    if queue is None:
        return None
    ns, pool = queue.namespace, queue.elasticity.pool
    own = rows.get((ns, Scope.QUEUE, queue.name))
    fleet = rows.get((ns, Scope.POOL, pool)) if pool is not None else None
    if (own is not None and own.launching) or (fleet is not None and fleet.launching):
        return "scaling_up"
    if fleet is not None and fleet.max and fleet.actual + fleet.launching >= fleet.max:
        return "pool_at_max"
    delay = queue.elasticity.steal_delay_s
    if delay is not None and load is not None and load.pending:
        age = load.oldest_pending_age_s
        if age is not None and age < delay:
            return "steal_delay"
    return None
