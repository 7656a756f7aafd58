"""Why a request waits, in resources (spec/resources.md): no daemon of its queue could ever
hold it (``no_daemon_fits``), or they could and are busy (``waiting_for_resources``).

Read from the worker rows the registry keeps — each daemon's ``resources`` (total, free) and
``running`` — so a reason costs no request to a daemon. A request that names nothing (one
CPU) is never judged here: any daemon fits it, and the queue's own reason
(``all_members_busy`` …) says it better.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakeshore.model import (
    Capacity,
    Resources,
    Worker,
    WorkerStatus,
    describe_capacity,
    describe_request,
    fits,
)

NO_DAEMON_FITS = "no_daemon_fits"
WAITING_FOR_RESOURCES = "waiting_for_resources"
#: Running job ids named in a reason (the rest counted).
_NAMED = 3
_SERVING = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.STARTING})


def asks_for_something(r: Resources | None) -> bool:
    """Whether a request names more than the default (one CPU, no GPU, memory untracked)."""
    return r is not None and r != Resources()


def infeasible(r: Resources, members: Sequence[Worker]) -> str | None:
    """``no_daemon_fits: …`` when members report their resources and none could ever hold
    ``r``; ``None`` otherwise (no member reports: nothing is known)."""
    reporting = _reporting(members)
    if not reporting or any(_fits_total(r, w) for w in reporting):
        return None
    largest = max(reporting, key=lambda w: _size(_total(w)))
    return (
        f"{NO_DAEMON_FITS}: needs {describe_request(r)}; the largest member, {largest.name}, "
        f"has {describe_capacity(_total(largest))}"
    )


def waiting(job_id: str, r: Resources, members: Sequence[Worker]) -> str | None:
    """Why ``job_id`` (pending, asking ``r``) waits in resources, or ``None`` when some
    member has what it needs free now (the queue's own reason then holds)."""
    if (none := infeasible(r, members)) is not None:
        return none
    fitting = [w for w in _reporting(members) if _fits_total(r, w)]
    holder = next((w for w in fitting if job_id in w.running), None)
    if holder is None and (not fitting or any(fits(r, _free(w), w.labels) for w in fitting)):
        return None
    if holder is not None:
        # Its daemon claimed it and holds it, taking nothing else, until its runs free enough.
        return (
            f"{WAITING_FOR_RESOURCES}: claimed by {holder.name}, which starts it once "
            f"{describe_request(r)} are free ({describe_capacity(_free(holder))} free now; "
            f"{_running(holder, job_id)})"
        )
    best = max(fitting, key=lambda w: _size(_free(w)))
    return (
        f"{WAITING_FOR_RESOURCES}: needs {describe_request(r)}; the most free is "
        f"{best.name}'s {describe_capacity(_free(best))} ({_running(best, job_id)})"
    )


def _running(w: Worker, but: str) -> str:
    ids = [i for i in w.running if i != but]
    if not ids:
        return "nothing running"
    named = ", ".join(ids[:_NAMED])
    more = f" and {len(ids) - _NAMED} more" if len(ids) > _NAMED else ""
    return f"running {named}{more}"


def _reporting(members: Sequence[Worker]) -> list[Worker]:
    return [w for w in members if w.resources is not None and w.status in _SERVING]


def _fits_total(r: Resources, w: Worker) -> bool:
    return fits(r, _total(w), w.labels)


def _total(w: Worker) -> Capacity:
    assert w.resources is not None
    return w.resources.total


def _free(w: Worker) -> Capacity:
    assert w.resources is not None
    return w.resources.free


def _size(c: Capacity) -> tuple[int, float, int]:
    return len(c.gpus), c.cpus, c.memory or 0
