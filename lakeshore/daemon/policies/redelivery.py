"""Redelivery policy: a delivery count above 1 is checked with the control plane first.

NATS cannot keep one daemon from acking or NAKing another's delivery (every daemon of a
queue may publish on its stream's ``$JS.ACK.>``), so a redelivery does not prove its earlier
attempt ended: a peer's NAK redelivers a running invocation at once. Before running one, the
daemon asks who holds an earlier attempt (``ls.<ns>.held.<id>``); one still held by a live
daemon is handed back with a delay (``nak``) rather than run a second time, however often a
peer NAKs it and however long the run lasts, and the running attempt stays the one whose
completion counts. A holder that let its run go (its heartbeat, sent after its claim, no
longer lists it) or died (silent for ``lost_after_s``) holds nothing: the redelivery runs.
When the control plane does not answer, the redelivery runs: its absence must not stall
recovery from a daemon's death.

The same answer tells how the earlier attempts ended (:class:`~.retries.Earlier`: how many
count toward ``max_attempts``, how many were lost in a row, whether any was preempted or
lost). A redelivery after ``max_lost`` lost attempts in a row — its daemon died under each —
is a poison pill: it is not run, and ends ``failed`` with reason ``lost_too_often``
(:func:`lost_too_often`). Without an answer nothing is known of the earlier attempts
(:data:`~.retries.UNKNOWN`): the retry count falls back to the delivery count, and the
redelivery runs — a poison pill is judged only by the history, since the delivery count also
grows on a stopping daemon's ``nak`` and a live holder's hand-backs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lakeshore.attempts import LOST_TOO_OFTEN_ERROR
from lakeshore.bus.work import WorkBus
from lakeshore.daemon.policies.retries import UNKNOWN, Earlier
from lakeshore.errors import LakeshoreError
from lakeshore.model import HeldAnswer, HeldAsk, Invocation, RemoteError, Takeover

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Redelivery:
    """What the control plane said of a redelivery."""

    #: the live holder of an earlier attempt: hand the delivery back for ``retry_s``
    #: (``None``: run it)
    held: HeldAnswer | None
    #: how the earlier attempts ended
    earlier: Earlier
    #: the earlier attempt this delivery takes over (its daemon died or let it go)
    takeover: Takeover | None = None


async def check_redelivery(bus: WorkBus, inv: Invocation, epoch: int, me: str) -> Redelivery:
    """Ask about attempt ``epoch`` of ``inv`` before running it (one request).

    Args:
        bus: the daemon's connection.
        inv: the redelivered invocation.
        epoch: this delivery's count (above 1).
        me: this daemon's id: an attempt it holds itself is one it let go (a daemon runs
            each delivery it claims, and gets a redelivery only of what it gave up).
    """
    try:
        answer = await bus.held(HeldAsk(namespace=inv.namespace, invocation_id=inv.id, epoch=epoch))
    except LakeshoreError as e:
        log.warning(
            "%s attempt %d: cannot ask who holds it (%s); running it, every earlier delivery "
            "counted as an attempt",
            inv.id, epoch, e,
        )  # fmt: skip
        return Redelivery(held=None, earlier=UNKNOWN)
    earlier = UNKNOWN
    if answer.history:
        earlier = Earlier(
            counted=answer.counted, lost_in_row=answer.lost_in_row, preempted=answer.preempted,
            executions=answer.attempts,
        )  # fmt: skip
    return Redelivery(held=_held(answer, me), earlier=earlier, takeover=answer.takeover)


def _held(answer: HeldAnswer, me: str) -> HeldAnswer | None:
    """A live holder's answer, unless the holder is this daemon: an attempt it held itself
    and does not run now is one it let go (a redelivery of what it runs now is handed back
    before the control plane is asked: ``Claimer.runs_here``)."""
    if answer.holder is None or answer.holder == me:
        return None
    return answer


def lost_too_often(earlier: Earlier, max_lost: int) -> RemoteError | None:
    """The error a poison pill ends with, when ``earlier`` says it is one: ``max_lost``
    attempts in a row lost; else ``None``, run it."""
    n = earlier.lost_in_row
    if n < max_lost:
        return None
    return RemoteError(
        type=LOST_TOO_OFTEN_ERROR,
        message=f"lost {n} attempts in a row (max_lost {max_lost}): the daemon running it "
        "died each time (killed, out of memory, its machine gone); not run again",
    )
