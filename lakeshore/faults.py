"""Fault points: named places where a fault test makes the control plane fail on purpose.

Armed only by the server setting ``fault_points`` (``LAKESHORE_FAULT_POINTS``), a comma-
separated list of ``point:action``; nothing is armed otherwise and a hit costs one dict
lookup. ``exit`` ends the process at once, as a SIGKILL would (no cleanup, no flush);
``raise`` raises :class:`FaultInjected` there, as a bug would (the actor crashes and is
restarted by its supervisor). The composition root builds one :class:`Faults` and hands it
to the pieces that have points; the points are listed in :data:`POINTS`.
"""

from __future__ import annotations

import logging
import os

from lakeshore.errors import Invalid

log = logging.getLogger(__name__)

#: Every fault point, and where it is.
POINTS = {
    "submit.keys_stored": "a submit's new idempotency keys are stored, nothing published",
    "submit.published": "a submit's invocations are in the stream, no event published",
    "submit.recorded": "a submit's events are in the outbox, the submit not answered",
    "queue.patch": "a queue actor is about to apply a PATCH",
    "recorder.appended": "the Recorder appended a batch to DuckDB, not yet acked it",
}
ACTIONS = ("exit", "raise")
#: The exit status of an ``exit`` fault (as if killed by SIGKILL).
EXIT_STATUS = 137


class FaultInjected(Exception):
    """Raised by a fault point armed with ``raise``: a stand-in for a bug."""


class Faults:
    """The armed fault points of one process.

    Args:
        spec: ``point:action[,point:action…]``; empty arms nothing.

    Raises:
        Invalid: an unknown point or action, naming the known ones.
    """

    def __init__(self, spec: str = "") -> None:
        self._armed: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            point, _, action = item.partition(":")
            if point not in POINTS or action not in ACTIONS:
                raise Invalid(
                    f"unknown fault point {item!r}: use POINT:ACTION with POINT one of "
                    f"{', '.join(POINTS)} and ACTION one of {', '.join(ACTIONS)}"
                )
            self._armed[point] = action
        if self._armed:
            log.warning("fault points armed: %s", ", ".join(sorted(self._armed)))

    def hit(self, point: str) -> None:
        """Fail here if ``point`` is armed."""
        action = self._armed.get(point)
        if action is None:
            return
        if action == "exit":
            log.error("fault point %s: exiting", point)
            os._exit(EXIT_STATUS)
        raise FaultInjected(f"fault point {point}")
