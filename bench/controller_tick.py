"""Time of one controller tick (``lakeshore.controller.tick``) at scale.

Not a test. Run with ``python bench/controller_tick.py [--runs N] [--seed S]``. It builds
one synthetic snapshot — 1,000 queues of mixed policies and states (half of them in 100
pools of 5), 1,000 workers (managed and hand-launched, idle, busy, starting, some
silent long enough to be lost, some holding steal leases) — times ``tick()`` on it and
prints the median and p95 against the target of 50 ms per tick.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from lakeshore.controller import (
    POOL_LABEL,
    QUEUE_LABEL,
    ControllerSettings,
    Lease,
    QueueLoad,
    Snapshot,
    tick,
)
from lakeshore.model import Elasticity, ElasticityKind, Queue, QueueState, Worker, WorkerStatus

TARGET_MS = 50.0
QUEUES = 1_000
POOLS = 100
POOL_SIZE = 5
WORKERS = 1_000
NAMESPACES = ("alpha", "beta", "gamma", "delta")
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def build(seed: int) -> Snapshot:
    rng = random.Random(seed)
    kinds = list(ElasticityKind)
    states = [QueueState.ACTIVE] * 8 + [QueueState.DRAINING, QueueState.ARCHIVED]
    queues: list[Queue] = []
    loads: dict[tuple[str, str], QueueLoad] = {}
    for i in range(QUEUES):
        ns = NAMESPACES[i % len(NAMESPACES)]
        name = f"q{i:04}"
        # The first POOLS * POOL_SIZE queues form the pools, members in one namespace.
        pool = f"pool{i // POOL_SIZE:03}" if i < POOLS * POOL_SIZE else None
        if pool is not None:
            ns = NAMESPACES[(i // POOL_SIZE) % len(NAMESPACES)]
        kind = kinds[i % len(kinds)]
        elasticity = Elasticity(
            kind=kind,
            min=1 if kind is ElasticityKind.ELASTIC else 0,
            max=0 if kind is ElasticityKind.FIXED else rng.randint(2, 12),
            pool=pool,
            match={"gpu": "h100"} if i % 7 == 0 else {},
            steal_delay_s=15.0 if i % 5 == 0 else None,
            cost_weight=rng.choice([0.5, 1.0, 2.0, 3.0]),
        )
        queues.append(
            Queue(
                name=name,
                namespace=ns,
                state=rng.choice(states),
                elasticity=elasticity,
                created_at=NOW,
                updated_at=NOW,
            )
        )
        pending = rng.choice([0, 0, rng.randint(1, 60)])
        loads[ns, name] = QueueLoad(
            namespace=ns,
            queue=name,
            pending=pending,
            running=rng.randint(0, 8),
            oldest_pending_age_s=rng.uniform(0, 120) if pending else None,
        )

    workers: list[Worker] = []
    idle_since: dict[str, datetime] = {}
    leases: dict[str, Lease] = {}
    statuses = [WorkerStatus.IDLE] * 4 + [WorkerStatus.BUSY] * 5 + [WorkerStatus.STARTING]
    for i in range(WORKERS):
        q = queues[rng.randrange(QUEUES)]
        managed = rng.random() < 0.6
        labels = dict(q.elasticity.match)
        if managed:
            labels[QUEUE_LABEL] = q.name
            if q.elasticity.pool is not None:
                labels[POOL_LABEL] = q.elasticity.pool
        status = rng.choice(statuses)
        silent_s = 30.0 if rng.random() < 0.02 else rng.uniform(0, 2)
        wid = f"w{i:04}"
        workers.append(
            Worker(
                id=wid,
                name=f"daemon-{i:04}",
                namespace=q.namespace,
                queues=[q.name],
                labels=labels,
                provider="local" if managed else "external",
                managed=managed,
                status=status,
                last_heartbeat=NOW - timedelta(seconds=silent_s),
                started_at=NOW - timedelta(hours=1),
            )
        )
        if status is WorkerStatus.IDLE:
            idle_since[wid] = NOW - timedelta(seconds=rng.uniform(0, 300))
        if rng.random() < 0.03:
            other = queues[rng.randrange(QUEUES)]
            until = NOW + timedelta(seconds=rng.uniform(-2, 3))
            leases[wid] = Lease(namespace=q.namespace, queue=other.name, until=until)

    launching = {(q.namespace, q.name): rng.randint(1, 2) for q in queues if rng.random() < 0.05}
    return Snapshot(
        now=NOW,
        queues=queues,
        workers=workers,
        loads=loads,
        launching=launching,
        leases=leases,
        idle_since=idle_since,
    )


def main(runs: int, seed: int) -> None:
    snapshot, settings = build(seed), ControllerSettings()
    result = tick(snapshot, settings)  # warm-up, and the decision mix to report
    timings_ms = []
    for _ in range(runs):
        start = time.perf_counter()
        tick(snapshot, settings)
        timings_ms.append((time.perf_counter() - start) * 1e3)
    timings_ms.sort()
    median = statistics.median(timings_ms)
    p95 = timings_ms[min(len(timings_ms) - 1, int(0.95 * len(timings_ms)))]
    mix = Counter(type(d).__name__ for d in result.decisions)
    print(
        f"{len(snapshot.queues)} queues ({POOLS} pools), {len(snapshot.workers)} workers: "
        f"{len(result.decisions)} decisions {dict(sorted(mix.items()))}, "
        f"{len(result.explanations)} explanation rows"
    )
    verdict = "within" if p95 <= TARGET_MS else "OVER"
    print(
        f"tick: median {median:.1f} ms, p95 {p95:.1f} ms over {runs} runs "
        f"({verdict} the {TARGET_MS:.0f} ms target)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    main(args.runs, args.seed)
