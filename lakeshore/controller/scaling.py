"""Scale-up and scale-down of one scaling unit: a queue alone, or a pool.

Shared rules (spec/elasticity.md, rule 5, and the choices made where it is silent):

* managed daemons up and launches in flight count as actual, and so do daemons lent to
  the queue by a live or a just-granted steal lease — so neither a launch in flight nor
  a steal is answered by a second launch for the same backlog;
* scale-up goes to ``desired`` at once, but at most ``max_surge`` launches per unit per
  tick (a pool is one unit, its members filled highest ``cost_weight`` first);
* a managed daemon found lost this tick is no longer counted, so its replacement is
  simply part of the scale-up, marked with ``replaces``: only units that still want it
  (elastic, fully_elastic, burst while bursting) launch one, never above ``desired``;
* scale-down retires surplus daemons that are idle, longest idle first, once idle for the
  wait :func:`~lakeshore.controller.policies.idle_wait_s` gives; never a busy or starting
  daemon, nor one lent by a steal lease.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from lakeshore.controller.decisions import (
    Explanation,
    Launch,
    Retire,
    Scope,
    scaling_inputs,
    verdict,
)
from lakeshore.controller.fleet import Fleet, UnitKey, satisfies
from lakeshore.controller.policies import desired, idle_wait_s
from lakeshore.controller.pools import attribute, fair_shares, pool_cap
from lakeshore.controller.snapshot import (
    POOL_LABEL,
    QUEUE_LABEL,
    ControllerSettings,
    Snapshot,
)
from lakeshore.model import DEFAULT_QUEUE, Queue, QueueState, Worker, WorkerStatus

#: Retirements sort by namespace, then highest ``cost_weight`` first, then queue and id.
RetireKey = tuple[str, float, str, str]


class Planner:
    """Collects one tick's launches, retirements and explanations, unit by unit.

    Args:
        snapshot: the tick's snapshot.
        settings: the controller's settings.
        fleet: the snapshot's workers, indexed.
        lent: daemons lent per ``(namespace, queue)``: live leases plus this tick's grants.
        keep: ids of daemons that must not be retired this tick (they hold a lease).
    """

    def __init__(
        self,
        snapshot: Snapshot,
        settings: ControllerSettings,
        fleet: Fleet,
        lent: Counter[tuple[str, str]],
        keep: set[str],
    ) -> None:
        self._snap, self._settings, self._fleet = snapshot, settings, fleet
        self._lent, self._keep = lent, keep
        self.launches: list[Launch] = []
        self.retires: list[tuple[RetireKey, Retire]] = []
        self.explanations: list[Explanation] = []
        self.visited: set[UnitKey] = set()

    def scale_queue(self, q: Queue) -> None:
        """Scale a queue that is in no pool."""
        ns, snap, fleet = q.namespace, self._snap, self._fleet
        unit: UnitKey = (ns, Scope.QUEUE, q.name)
        self.visited.add(unit)
        load = snap.load(ns, q.name)
        up = fleet.up.get(unit, [])
        flying = snap.launching.get((ns, q.name), 0)
        hand, lent = fleet.hand[ns, q.name], self._lent[ns, q.name]
        want, why = desired(q, load, len(up) + flying, hand, snap.gpus_of(q))
        n = min(max(0, want - len(up) - flying - lent), self._settings.max_surge)
        retire = self._idle_surplus(up, len(up) + flying - want, idle_wait_s(q, load))
        reason = f"{why}; {verdict(len(up), flying, lent, n, len(retire))}"
        # Inputs are built only for decisions: most queues hold, and a tick must stay cheap.
        if n or retire:
            inputs = scaling_inputs(q, load, hand, want, len(up), flying, lent)
            inputs["max_surge"] = self._settings.max_surge
            if n:
                lost = [w.id for w in fleet.lost_managed.get(unit, [])]
                self.launches.append(self._launch(q, None, n, lost[:n], [q], reason, inputs))
            for w in retire:
                self._retire(w, q, None, reason, inputs)
        self._explain(ns, Scope.QUEUE, q.name, want, len(up), flying, reason)

    def scale_pool(self, ns: str, pool: str, members: list[Queue]) -> None:
        """Scale a pool: its members' asks, capped and shared, filled by one fleet."""
        snap, fleet = self._snap, self._fleet
        unit: UnitKey = (ns, Scope.POOL, pool)
        self.visited.add(unit)
        # Deficits are filled, and surge spent, highest cost_weight first.
        members = sorted(members, key=lambda m: (-m.elasticity.cost_weight, m.name))
        live = [m for m in members if m.state is not QueueState.ARCHIVED]
        cap = pool_cap(live)
        up = fleet.up.get(unit, [])
        own = Counter(w.labels.get(QUEUE_LABEL) for w in up)
        flying = {m.name: snap.launching.get((ns, m.name), 0) for m in members}
        loads = {m.name: snap.load(ns, m.name) for m in members}
        asks: dict[str, int] = {}
        whys: dict[str, str] = {}
        for m in members:
            managed = own[m.name] + flying[m.name]
            asks[m.name], whys[m.name] = desired(
                m, loads[m.name], managed, fleet.hand[ns, m.name], snap.gpus_of(m)
            )
        weights = {m.name: m.elasticity.cost_weight for m in members}
        shares = fair_shares(cap, asks, weights)
        assigned, free = attribute(
            members, shares, flying, up, lambda w: fleet.idle_since(w).timestamp()
        )
        demand = sum(asks.values())
        split = ", ".join(f"{m.name} {asks[m.name]}→{shares[m.name]}" for m in members)
        bound = "capped at" if demand > cap else "within"
        pool_why = f"pool {pool}: demand {demand} {bound} pool max {cap} ({split})"
        pool_inputs = {"pool": pool, "pool_cap": cap, "asks": asks, "weights": weights}
        surge = self._settings.max_surge
        lost = [w.id for w in fleet.lost_managed.get(unit, [])]
        launched = 0
        for m in members:
            have, lent, share = len(assigned[m.name]), self._lent[ns, m.name], shares[m.name]
            n = min(max(0, share - have - flying[m.name] - lent), surge - launched)
            why = f"{whys[m.name]}; {pool_why}; {verdict(have, flying[m.name], lent, n, 0)}"
            if n:
                hand = fleet.hand[ns, m.name]
                inputs = scaling_inputs(m, loads[m.name], hand, share, have, flying[m.name], lent)
                inputs.update(pool_inputs, ask=asks[m.name], share=share, max_surge=surge)
                self.launches.append(self._launch(m, pool, n, lost[:n], live, why, inputs))
                lost, launched = lost[n:], launched + n
            self._explain(ns, Scope.QUEUE, m.name, share, have, flying[m.name], why, pool)
        by_name = {m.name: m for m in members}
        retired = 0
        for w in free:
            m = by_name.get(w.labels.get(QUEUE_LABEL, ""))
            wait = 0.0 if m is None else idle_wait_s(m, loads[m.name])
            if self._idle_surplus([w], 1, wait):
                why = f"{pool_why}; no member's share needs it"
                self._retire(w, m, pool, why, {**pool_inputs, "shares": shares, "wait_s": wait})
                retired += 1
        in_flight = sum(flying.values())
        why = f"{pool_why}; {verdict(len(up), in_flight, 0, launched, retired)}"
        self._explain(ns, Scope.POOL, pool, sum(shares.values()), len(up), in_flight, why)

    def retire_orphans(self) -> None:
        """Retire idle managed daemons whose queue or pool is gone or has moved on."""
        for unit, up in self._fleet.up.items():
            if unit in self.visited:
                continue
            _, scope, name = unit
            why = f"no {scope.value} {name!r} scales these daemons any more"
            for w in self._idle_surplus(up, len(up), 0.0):
                self._retire(w, None, w.labels.get(POOL_LABEL), why, {"scope": scope.value})

    def _explain(
        self,
        ns: str,
        scope: Scope,
        name: str,
        want: int,
        up: int,
        flying: int,
        reason: str,
        pool: str | None = None,
    ) -> None:
        row = Explanation(
            namespace=ns,
            scope=scope,
            name=name,
            desired=want,
            actual=up,
            launching=flying,
            reason=reason,
            pool=pool,
        )
        self.explanations.append(row)

    def _idle_surplus(self, up: list[Worker], surplus: int, wait_s: float | None) -> list[Worker]:
        if wait_s is None or surplus <= 0:
            return []
        fleet = self._fleet
        idle = [
            w
            for w in up
            if w.status is WorkerStatus.IDLE
            and w.id not in self._keep
            and fleet.idle_for_s(w) >= wait_s
        ]
        idle.sort(key=lambda w: (fleet.idle_since(w), w.id))
        return idle[:surplus]

    def _launch(
        self,
        q: Queue,
        pool: str | None,
        count: int,
        replaces: list[str],
        serving: Iterable[Queue],
        reason: str,
        inputs: dict[str, Any],
    ) -> Launch:
        labels = {**q.elasticity.match, QUEUE_LABEL: q.name}
        if pool is not None:
            labels[POOL_LABEL] = pool
        names = sorted(s.name for s in serving if satisfies(labels, s.elasticity.match))
        # ``[]`` is how membership says "the default queue"; the system writes no sentinel.
        queues = [] if names == [DEFAULT_QUEUE] else names
        if replaces:
            reason = f"{reason} (replacing lost {', '.join(replaces)})"
        return Launch(
            namespace=q.namespace,
            queue=q.name,
            pool=pool,
            count=count,
            provider=q.elasticity.provider,
            queues=queues,
            labels=labels,
            replaces=replaces,
            reason=reason,
            inputs=inputs,
        )

    def _retire(
        self, w: Worker, q: Queue | None, pool: str | None, reason: str, inputs: dict[str, Any]
    ) -> None:
        queue = q.name if q is not None else w.labels.get(QUEUE_LABEL)
        weight = q.elasticity.cost_weight if q is not None else 0.0
        idle_s = self._fleet.idle_for_s(w)
        decision = Retire(
            namespace=w.namespace,
            worker_id=w.id,
            queue=queue,
            pool=pool,
            reason=f"{w.name} idle {idle_s:g}s: {reason}",
            inputs={**inputs, "idle_s": idle_s},
        )
        self.retires.append(((w.namespace, -weight, queue or "", w.id), decision))
