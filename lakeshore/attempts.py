"""How an invocation's attempts count (pure, no I/O): spec/runs.md §4.

An attempt that failed counts toward ``max_attempts``, and so does the one that succeeded.
How it failed is its outcome: ``timed_out`` (it ran past ``timeout_s`` and was stopped),
``crashed`` (its process died instead of answering: a signal such as ``SIGSEGV`` or the OOM
killer's ``SIGKILL``, or a worker process's exit), else ``retrying`` (its code's error,
retried) or ``failed`` (the last). The daemon names the first two on the ``retrying`` or
``failed`` event (``cause``, with ``killed`` or ``signal``). One stopped through no fault of
its own does not count:

* ``preempted``: its daemon stopped or retired and interrupted it (the ``retrying`` event
  with reason ``interrupted``);
* ``lost``: its daemon died under it (SIGKILL, the machine gone): the control plane sent
  it back to the queue when it declared the daemon lost (the ``retrying`` event with reason
  ``lost``), or the claim was redelivered.

Lost attempts in a row are a poison pill's mark: an invocation whose daemon dies under it
``max_lost`` times in a row ends ``failed`` with reason ``lost_too_often``
(:data:`LOST_TOO_OFTEN`) rather than take down one daemon after another.

The control plane tallies the history (:func:`tally`) and tells a daemon before it runs a
redelivery (``HeldAnswer``); the daemon decides (``lakeshore/daemon/policies``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from lakeshore.model import Attempt, Cause, Stopping

#: A failed attempt's outcome when it ran past its timeout / its process died: the
#: ``cause`` on its ``retrying`` or ``failed`` event.
TIMED_OUT, CRASHED = Cause.TIMED_OUT.value, Cause.CRASHED.value
#: Outcomes of attempts that count toward ``max_attempts``.
COUNTED = frozenset({"retrying", "failed", TIMED_OUT, CRASHED, "succeeded"})
#: Outcomes of attempts stopped through no fault of their own.
PREEMPTED, LOST = "preempted", "lost"
#: The ``retrying`` event's ``reason`` of a run its stopping daemon interrupted.
INTERRUPTED = "interrupted"
#: The ``retrying`` event's ``reason`` of a run whose daemon was declared lost: the control
#: plane's, which sends the invocation back to the queue then (not a lease later).
LOST_DAEMON = "lost"
#: The ``failed`` event's ``reason`` of a poison pill.
LOST_TOO_OFTEN = "lost_too_often"
#: The error type of a poison pill's ``Result``.
LOST_TOO_OFTEN_ERROR = "lakeshore.LostTooOften"


class Tally(NamedTuple):
    """How the earlier attempts of an invocation stand."""

    #: attempts that count toward ``max_attempts``
    counted: int = 0
    #: attempts lost in a row at the end
    lost_in_row: int = 0
    #: some attempt was preempted or lost
    preempted: bool = False
    #: attempts of any outcome: the next one's number is this plus one
    executions: int = 0


def tally(attempts: Iterable[Attempt], *, before: int | None = None) -> Tally:
    """Count ``attempts`` (as the history lists them, by epoch).

    Args:
        attempts: a job's attempts.
        before: only the attempts of an epoch below this one: those before the redelivery
            about to run. One of them still ``running`` is ``lost`` then: its daemon let it
            go (the asker has checked that no live daemon holds it).

    Returns:
        The tally.
    """
    counted = in_row = executions = 0
    preempted = False
    for a in attempts:
        if before is not None and (a.epoch is None or a.epoch >= before):
            continue
        executions += 1
        outcome = LOST if before is not None and a.outcome == "running" else a.outcome
        counted += outcome in COUNTED
        in_row = in_row + 1 if outcome == LOST else 0
        preempted = preempted or outcome in (LOST, PREEMPTED)
    return Tally(counted=counted, lost_in_row=in_row, preempted=preempted, executions=executions)


def stopping_text(stopping: Stopping, at: datetime) -> str:
    """A running attempt's stop as a job shows it at ``at``: "cancel requested; SIGTERM
    sent 4 s ago, SIGKILL in 6 s"."""
    ago = max((at - stopping.since).total_seconds(), 0.0)
    left = stopping.grace_s - ago
    kill = (
        f"SIGKILL in {left:.0f} s"
        if left > 0
        else f"SIGKILL due after its {stopping.grace_s:g} s grace"
    )
    return f"{stopping.why}; SIGTERM sent {ago:.0f} s ago, {kill}"
