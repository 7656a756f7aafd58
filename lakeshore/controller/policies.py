"""How many managed daemons a queue wants, by policy and state (spec/elasticity.md).

Two functions, both pure:

* :func:`desired` — the count and the reason;
* :func:`idle_wait_s` — how long a surplus daemon must have been idle before it may be
  retired (or that it never may be).

Open points of the spec, decided here:

* ``burst`` sizes the *whole* queue with the elastic formula and subtracts the
  hand-launched baseline: managed = ``clamp(ceil((pending + running) / target_pending) -
  hand, min, max)`` while bursting, 0 otherwise. A burst starts when the oldest pending
  invocation has waited ``burst_after_s`` and goes on while the queue has managed daemons
  (launching included) and any pending or running work; ``min`` is a floor only while
  bursting, since the hand-launched daemons are the baseline.
* ``draining`` holds at ``min(policy's desired, managed daemons)`` until the queue is
  empty, then wants 0; ``paused`` (no route sets it) holds what it has.
* Retirements the state forces (archived, draining and empty) do not wait
  ``scale_down_idle_s``; they wait only for the daemon to be idle, since nothing will
  ever want it again.
"""

from __future__ import annotations

from lakeshore.controller.snapshot import QueueLoad
from lakeshore.model import ElasticityKind, Queue, QueueState, Resources
from lakeshore.model.resources import DaemonGpus

#: A provider whose daemons bring no GPU.
NO_GPUS = DaemonGpus()


def desired(
    queue: Queue,
    load: QueueLoad,
    managed_count: int,
    hand_count: int,
    gpus: DaemonGpus = NO_GPUS,
) -> tuple[int, str]:
    """The managed daemons ``queue`` wants now, by its state and then its policy.

    No ``now`` parameter: ``load.oldest_pending_age_s`` is already the age at the
    snapshot's ``now``.

    Args:
        queue: the queue row (its ``state`` and ``elasticity``).
        load: its backlog.
        managed_count: managed daemons it has up, launches in flight included.
        hand_count: hand-launched daemons serving it (``burst``'s baseline).
        gpus: the GPUs each daemon its provider launches brings (:func:`sized`).

    Returns:
        ``(desired, reason)``: desired ≥ 0 managed daemons, and one line saying why.
    """
    state = queue.state
    if state is QueueState.ARCHIVED:
        return 0, "archived: wants 0 managed daemons"
    if state is QueueState.PAUSED:
        return managed_count, f"paused: holds its {managed_count} managed daemons"
    want, why = _by_policy(queue, load, managed_count, hand_count, gpus)
    if state is QueueState.DRAINING:
        if load.pending == 0 and load.running == 0:
            return 0, "draining and empty: wants 0 managed daemons"
        held = min(want, managed_count)
        return held, f"{why}; draining never scales up → {held}"
    return want, why


def idle_wait_s(queue: Queue, load: QueueLoad) -> float | None:
    """Seconds a surplus managed daemon must have been idle before it is retired.

    Returns:
        0.0 when the queue's state retires its daemons as soon as they are idle
        (archived; draining and empty); None when the controller retires nothing for it
        (``fixed``, ``paused``); otherwise the queue's ``scale_down_idle_s``.
    """
    if queue.state is QueueState.ARCHIVED:
        return 0.0
    if queue.state is QueueState.DRAINING and load.pending == 0 and load.running == 0:
        return 0.0
    if queue.state is QueueState.PAUSED or queue.elasticity.kind is ElasticityKind.FIXED:
        return None
    return queue.elasticity.scale_down_idle_s


def sized(queue: Queue, load: QueueLoad, gpus: DaemonGpus) -> tuple[int, str]:
    """The daemons the queue's work sizes for, and how.

    Without GPU requests: ``ceil((pending + running) / target_pending)``. With some, the
    larger of that count over the rest of the work and the daemons their GPUs need at
    ``gpus.count`` per daemon, ``ceil(sum of GPUs asked / gpus.count)``; requests no daemon
    of the provider could ever hold (more GPUs, another type) count for nothing: launching
    for them would not run them.
    """
    e = queue.elasticity
    asking = sum(n for _, _, n in load.gpu_asks)
    if not asking:
        n = -(-(load.pending + load.running) // e.target_pending)
        return n, (
            f"pending {load.pending} + running {load.running} at target_pending "
            f"{e.target_pending} → {n}"
        )
    fit = [(g, n) for g, t, n in load.gpu_asks if gpus.fits(Resources(gpus=g, gpu_type=t))]
    held = sum(n for _, n in fit)
    need = sum(g * n for g, n in fit)
    by_gpus = -(-need // gpus.count) if need else 0
    rest = max(0, load.pending - asking) + load.running
    by_count = -(-rest // e.target_pending)
    n = max(by_count, by_gpus)
    unfit = (
        f"; {asking - held} that no daemon of {e.provider} ({gpus.count} GPUs"
        f"{' ' + gpus.gpu_type if gpus.gpu_type else ''}) could hold"
        if held < asking
        else ""
    )
    return n, (
        f"pending {load.pending} ({asking} asking GPUs: {need} GPUs at {gpus.count} per daemon"
        f" → {by_gpus}{unfit}) + running {load.running}: {rest} at target_pending "
        f"{e.target_pending} → {by_count}; → {n}"
    )


def _by_policy(
    queue: Queue, load: QueueLoad, managed: int, hand: int, gpus: DaemonGpus
) -> tuple[int, str]:
    e = queue.elasticity
    work = load.pending + load.running
    sized_n, sizing = sized(queue, load, gpus)
    if e.kind is ElasticityKind.FIXED:
        return 0, "fixed: the controller launches and retires nothing"
    if e.kind is ElasticityKind.ELASTIC:
        # The validator already enforces min ≥ 1; a row written before it must not let
        # an elastic queue reach zero.
        return _clamped(sized_n, max(e.min, 1), e.max, sizing)
    if e.kind is ElasticityKind.FULLY_ELASTIC:
        return _clamped(sized_n, e.min, e.max, sizing)
    age = load.oldest_pending_age_s
    triggered = age is not None and age >= e.burst_after_s
    if not triggered and not (managed > 0 and work > 0):
        waited = "nothing pending" if age is None else f"oldest pending {age:g}s"
        return 0, f"burst: {waited} < burst_after_s {e.burst_after_s:g}s → 0"
    start = "bursting" if triggered else "still bursting"
    return _clamped(sized_n - hand, e.min, e.max, f"{start}: {sizing} - {hand} by hand")


def _clamped(n: int, lo: int, hi: int, why: str) -> tuple[int, str]:
    # max wins over min if a stored row has max < min: never launch past max.
    d = min(max(n, lo), hi)
    return d, f"{why} → desired {d} (min {lo}, max {hi})"
