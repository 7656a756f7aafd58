"""Shared pools: dividing a capped pool among its members, and whose daemon is whose.

A pool's demand is the sum of its members' desired counts, capped by the pool max (the
largest ``max`` among its members that are not archived). When the cap binds, capacity
is shared max-min fair in proportion to ``cost_weight`` (:func:`fair_shares`).

A pool daemon is launched for one member's share (its ``lakeshore.io/queue`` label) with
that member's ``match`` labels, and serves every member whose ``match`` its labels
satisfy. :func:`attribute` assigns the daemons up to the members' shares — first to the
member each was launched for, then any left over to other members it can serve — so that
a daemon one member no longer needs fills another's share before anything is launched or
retired.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from lakeshore.controller.fleet import satisfies
from lakeshore.controller.snapshot import QUEUE_LABEL
from lakeshore.model import Queue, Worker, WorkerStatus


def fair_shares(cap: int, asks: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, int]:
    """Divide ``cap`` daemons among members max-min fair, in proportion to weight.

    Water-filling: every member is offered ``level * weight``; a member asking less gets
    its ask and the rest is offered again to the others, until the level at which the
    offers add up to the cap. Fractional offers become whole daemons by largest
    remainder: each member gets the floor of its offer, and the daemons left go one each
    to the largest fractional parts, ties to the member name that sorts first. The
    arithmetic is exact (weights become integers over a common denominator), so the
    result does not depend on float rounding or on the order of ``asks``.

    Args:
        cap: daemons available (≥ 0).
        asks: daemons each member wants, by member name (each ≥ 0).
        weights: each member's ``cost_weight`` (> 0), by member name.

    Returns:
        Daemons per member: never more than its ask, and summing to
        ``min(cap, sum(asks))``.
    """
    if sum(asks.values()) <= cap:
        return dict(asks)
    ratios = {name: weights[name].as_integer_ratio() for name in asks}
    scale = math.lcm(*(den for _, den in ratios.values()))
    weight = {name: num * (scale // den) for name, (num, den) in ratios.items()}
    shares: dict[str, int] = {}
    left, total = cap, sum(weight.values())
    # Satisfying a member that asks no more than its offer only raises the level for the
    # others, so repeating until nobody else fits reaches the water-filling level.
    settled = False
    while not settled:
        settled = True
        for name in asks.keys() - shares.keys():
            if asks[name] * total <= left * weight[name]:
                shares[name] = asks[name]
                left, total = left - asks[name], total - weight[name]
                settled = False
    # The others get left * weight / total each: its floor, then the largest remainders.
    remainders: dict[str, int] = {}
    for name in asks.keys() - shares.keys():
        shares[name], remainders[name] = divmod(left * weight[name], total)
    spare = cap - sum(shares.values())
    for name in sorted(remainders, key=lambda n: (-remainders[n], n))[:spare]:
        shares[name] += 1
    return {name: shares[name] for name in asks}


def pool_cap(members: Iterable[Queue]) -> int:
    """The pool max: the largest ``max`` among the members."""
    return max((q.elasticity.max for q in members), default=0)


def _keep_order(idle_since: Callable[[Worker], float]) -> Callable[[Worker], tuple]:
    # Busy and starting daemons are kept before idle ones (they cannot be retired anyway),
    # and the most recently idle before the longest idle, so the daemons left over are
    # the ones that have waited longest for work.
    rank = {WorkerStatus.BUSY: 0, WorkerStatus.STARTING: 1}
    return lambda w: (rank.get(w.status, 2), -idle_since(w), w.id)


def attribute(
    members: list[Queue],
    shares: Mapping[str, int],
    launching: Mapping[str, int],
    workers: list[Worker],
    idle_since: Callable[[Worker], float],
) -> tuple[dict[str, list[Worker]], list[Worker]]:
    """Assign a pool's daemons to its members' shares.

    Args:
        members: the pool's queues, in the order deficits are filled (highest
            ``cost_weight`` first, then by name).
        shares: each member's share, by name.
        launching: launches in flight per member; they fill the share first.
        workers: the pool's managed daemons that are up.
        idle_since: a daemon's idle-since time as a POSIX timestamp (seconds).

    Returns:
        ``(assigned, free)``: the daemons filling each member's share, and the ones no
        member needs — the pool's surplus, which scale-down may retire.
    """
    order = _keep_order(idle_since)
    names = {q.name for q in members}
    own: dict[str, list[Worker]] = {name: [] for name in names}
    free: list[Worker] = []
    for w in workers:
        launched_for = w.labels.get(QUEUE_LABEL)
        (own[launched_for] if launched_for in names else free).append(w)
    assigned: dict[str, list[Worker]] = {}
    for q in members:
        room = max(0, shares[q.name] - launching.get(q.name, 0))
        mine = sorted(own[q.name], key=order)
        assigned[q.name] = mine[:room]
        free.extend(mine[room:])
    free.sort(key=order)
    for q in members:
        need = shares[q.name] - launching.get(q.name, 0) - len(assigned[q.name])
        if need <= 0 or not free:
            continue
        taken = [w for w in free if satisfies(w.labels, q.elasticity.match)][:need]
        assigned[q.name].extend(taken)
        taken_ids = {w.id for w in taken}
        free = [w for w in free if w.id not in taken_ids]
    return assigned, free
