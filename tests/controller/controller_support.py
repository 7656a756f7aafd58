"""Builders for rule-book tests: rows and snapshots at a fixed, injected ``NOW``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from lakeshore.controller import (
    POOL_LABEL,
    QUEUE_LABEL,
    ControllerSettings,
    GrantSteal,
    Launch,
    Lease,
    MarkLost,
    QueueLoad,
    Retire,
    Snapshot,
    TickResult,
    tick,
)
from lakeshore.model import Elasticity, ElasticityKind, Queue, QueueState, Worker, WorkerStatus

NS = "ns"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
#: Settings with a surge larger than any test asks for, when surge is not under test.
WIDE = ControllerSettings(max_surge=100)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def queue(
    name: str = "q",
    kind: str = "elastic",
    *,
    state: QueueState = QueueState.ACTIVE,
    ns: str = NS,
    **elasticity: Any,
) -> Queue:
    if kind == "elastic":
        elasticity.setdefault("min", 1)
    if kind != "fixed":
        elasticity.setdefault("max", 8)
    return Queue(
        name=name,
        namespace=ns,
        state=state,
        elasticity=Elasticity(kind=ElasticityKind(kind), **elasticity),
        created_at=ago(3600),
        updated_at=ago(3600),
    )


def worker(
    wid: str,
    *,
    status: WorkerStatus = WorkerStatus.IDLE,
    queues: Iterable[str] = (),
    managed_for: str | None = None,
    pool: str | None = None,
    labels: dict[str, str] | None = None,
    heartbeat_age_s: float | None = 0.5,
    ns: str = NS,
) -> Worker:
    """A worker; ``managed_for`` makes it a managed daemon launched for that queue."""
    all_labels = dict(labels or {})
    if managed_for is not None:
        all_labels[QUEUE_LABEL] = managed_for
        if pool is not None:
            all_labels[POOL_LABEL] = pool
        queues = queues or [managed_for]
    return Worker(
        id=wid,
        name=f"name-{wid}",
        namespace=ns,
        queues=list(queues),
        labels=all_labels,
        provider="local" if managed_for else "external",
        managed=managed_for is not None,
        status=status,
        last_heartbeat=None if heartbeat_age_s is None else ago(heartbeat_age_s),
        started_at=ago(3600),
    )


def load(
    name: str = "q", pending: int = 0, running: int = 0, age_s: float | None = None, ns: str = NS
) -> QueueLoad:
    if pending and age_s is None:
        age_s = 0.0
    return QueueLoad(
        namespace=ns, queue=name, pending=pending, running=running, oldest_pending_age_s=age_s
    )


def snapshot(
    queues: Iterable[Queue],
    workers: Iterable[Worker] = (),
    loads: Iterable[QueueLoad] = (),
    *,
    launching: dict[str, int] | None = None,
    leases: dict[str, tuple[str, float]] | None = None,
    idle_s: dict[str, float] | None = None,
    now: datetime = NOW,
) -> Snapshot:
    """A snapshot in namespace ``NS``.

    Args:
        launching: launches in flight by queue name.
        leases: live or lapsed leases: worker id → (queue, seconds until it lapses).
        idle_s: seconds each worker has been idle, by worker id.
    """
    return Snapshot(
        now=now,
        queues=list(queues),
        workers=list(workers),
        loads={(x.namespace, x.queue): x for x in loads},
        launching={(NS, q): n for q, n in (launching or {}).items()},
        leases={
            wid: Lease(namespace=NS, queue=q, until=now + timedelta(seconds=s))
            for wid, (q, s) in (leases or {}).items()
        },
        idle_since={wid: now - timedelta(seconds=s) for wid, s in (idle_s or {}).items()},
    )


def run(snap: Snapshot, settings: ControllerSettings = WIDE) -> TickResult:
    return tick(snap, settings)


def launched(result: TickResult) -> dict[str, int]:
    """Launch counts by queue name."""
    out: dict[str, int] = {}
    for d in result.decisions:
        if isinstance(d, Launch):
            out[d.queue] = out.get(d.queue, 0) + d.count
    return out


def launches(result: TickResult) -> list[Launch]:
    return [d for d in result.decisions if isinstance(d, Launch)]


def retired(result: TickResult) -> list[str]:
    return [d.worker_id for d in result.decisions if isinstance(d, Retire)]


def stolen(result: TickResult) -> dict[str, str]:
    """Granted leases: worker id → queue."""
    return {d.worker_id: d.queue for d in result.decisions if isinstance(d, GrantSteal)}


def lost(result: TickResult) -> list[str]:
    return [d.worker_id for d in result.decisions if isinstance(d, MarkLost)]


def explained(result: TickResult, name: str) -> tuple[int, int, int]:
    """(desired, actual, launching) of the explanation row named ``name``."""
    row = next(e for e in result.explanations if e.name == name)
    return row.desired, row.actual, row.launching
