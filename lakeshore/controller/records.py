"""The queue events that record the controller's decisions, built from the decisions.

Every applied decision is recorded on the queue it concerns, with its ``reason`` and the
``inputs`` it was computed from, so ``lakeshore queues events --verbose`` explains it and
the rule book can recompute it:

* ``scale.decision`` — a launch or a retirement the rule book decided (``decision``,
  ``reason``, ``inputs`` and the decision's own fields), followed by its outcome:
* ``scaled_up`` — the daemons launched (names and ids);
* ``scaled_down`` — the daemon told to retire (it finishes its current run, then exits);
* ``daemon_replaced`` — one per lost managed daemon a launch replaces;
* ``steal_granted`` — a lease lending an idle daemon to the queue;
* ``daemon_lost`` — written by the WorkerRegistry, which owns the status, with the
  controller's reason and inputs merged into its detail (:func:`lost_detail`).

Nothing is recorded for a decision that could not be applied (it is retried next tick and
the status shows the error), nor for a tick that decides nothing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from lakeshore.controller.decisions import GrantSteal, Launch, MarkLost, Retire
from lakeshore.model import DEFAULT_QUEUE, Worker


class Record(NamedTuple):
    """One queue event to append."""

    namespace: str
    queue: str
    type: str
    detail: dict[str, Any]


def launched(d: Launch, rows: list[Worker], lost: list[Worker]) -> list[Record]:
    """The records of an applied launch: the decision, the daemons, the replacements.

    Args:
        d: the decision.
        rows: the launched daemons' rows.
        lost: the lost managed daemons the launch replaces (at most one per new daemon).
    """
    ns, q = d.namespace, d.queue
    names, ids = [w.name for w in rows], [w.id for w in rows]
    decision = {
        "decision": "launch",
        "count": d.count,
        "provider": d.provider,
        "pool": d.pool,
        "queues": d.queues,
        "labels": d.labels,
        "replaces": [w.id for w in lost],
        "reason": d.reason,
        "inputs": d.inputs,
    }
    up = {"reason": d.reason, "workers": names, "ids": ids, "provider": d.provider, "pool": d.pool}
    out = [Record(ns, q, "scale.decision", decision), Record(ns, q, "scaled_up", up)]
    for old, new in zip(lost, rows, strict=False):
        detail = {
            "reason": f"managed daemon {old.name} is lost; {new.name} replaces it",
            "lost": old.id,
            "lost_name": old.name,
            "by": new.id,
            "by_name": new.name,
        }
        out.append(Record(ns, q, "daemon_replaced", detail))
    return out


def retired(d: Retire, w: Worker) -> list[Record]:
    """The records of an applied retirement (on the queue the daemon was launched for)."""
    queue = d.queue or (w.queues[0] if w.queues else DEFAULT_QUEUE)
    decision = {
        "decision": "retire",
        "worker": w.id,
        "pool": d.pool,
        "reason": d.reason,
        "inputs": d.inputs,
    }
    down = {"reason": d.reason, "worker": w.id, "name": w.name, "pool": d.pool}
    return [
        Record(d.namespace, queue, "scale.decision", decision),
        Record(d.namespace, queue, "scaled_down", down),
    ]


def steal_granted(d: GrantSteal, w: Worker | None) -> Record:
    """The record of a lease lending ``w`` to ``d.queue``."""
    detail = {
        "reason": d.reason,
        "worker": d.worker_id,
        "name": w.name if w is not None else None,
        "until": d.until.isoformat(),
        "inputs": d.inputs,
    }
    return Record(d.namespace, d.queue, "steal_granted", detail)


def lost_detail(d: MarkLost) -> dict[str, Any]:
    """What the controller adds to the registry's ``daemon_lost`` events."""
    return {"reason": d.reason, "inputs": d.inputs, "by": "controller"}
