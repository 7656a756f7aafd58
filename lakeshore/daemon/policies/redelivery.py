"""Redelivery policy: a delivery count above 1 is checked with the control plane first.

NATS cannot keep one daemon from acking or NAKing another's delivery (every daemon of a
queue may publish on its stream's ``$JS.ACK.>``), so a redelivery does not prove its earlier
attempt ended: a peer's NAK redelivers a running invocation at once. Before running one, the
daemon asks who holds an earlier attempt (``ls.<ns>.held.<id>``); one still held by a live
daemon is handed back with a delay (``nak``) rather than run a second time, and the
running attempt stays the one whose completion counts. When the control plane does not
answer, the redelivery runs: its absence must not stall recovery from a daemon's death.
"""

from __future__ import annotations

import logging

from lakeshore.bus.work import WorkBus
from lakeshore.errors import LakeshoreError
from lakeshore.model import HeldAnswer, HeldAsk, Invocation

log = logging.getLogger(__name__)


#: Hand-backs of one invocation past its held attempt before it runs anyway: a holder that
#: is live but let its run go without a word (its result could not be stored through an
#: outage, and its claim was left to a redelivery) must not keep it from running for ever.
MAX_HAND_BACKS = 12


async def still_held(bus: WorkBus, inv: Invocation, epoch: int, me: str) -> HeldAnswer | None:
    """The live holder of an earlier attempt of ``inv``, or ``None``: run attempt ``epoch``.

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
        log.warning("%s attempt %d: cannot ask who holds it (%s); running it", inv.id, epoch, e)
        return None
    if answer.holder is None or answer.holder == me:
        return None
    if epoch - answer.epoch > MAX_HAND_BACKS:
        log.warning(
            "%s attempt %d: handed back %d times to %s (attempt %d); running it",
            inv.id, epoch, epoch - answer.epoch - 1, answer.holder, answer.epoch,
        )  # fmt: skip
        return None
    return answer
