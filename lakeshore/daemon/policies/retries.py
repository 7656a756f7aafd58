"""Retry policy: which failed attempts go back to the queue, and after how long.

A failed attempt is retried while the attempts that count toward ``max_attempts`` —
failed, timed out, crashed; not preempted nor lost (:mod:`lakeshore.attempts`) — are fewer.
The claim's epoch (JetStream's delivery count) also grows on a stopping daemon's ``nak``
and on a dead daemon's redelivery, so a redelivery learns how the earlier attempts ended
from the control plane (:class:`Earlier`, from the held answer, :mod:`.redelivery`); when
the control plane cannot tell, every earlier delivery is counted (``epoch - 1``), as
before the history was asked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from lakeshore.errors import Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Longest delay before a retried attempt is delivered again (seconds).
MAX_BACKOFF_S = 60.0
#: First and longest pause between two tries of a settling step (seconds).
FIRST_PAUSE_S, LONGEST_PAUSE_S = 0.1, 2.0


@dataclass(frozen=True, slots=True)
class Earlier:
    """How a claim's earlier attempts ended, as far as the daemon knows."""

    #: earlier attempts that count toward ``max_attempts``; ``None``: not known (the
    #: control plane did not tell), every earlier delivery counts
    counted: int | None = 0
    #: earlier attempts lost in a row just before this one (0 when not known: a poison
    #: pill is judged only by the history, never by the delivery count)
    lost_in_row: int = 0
    #: an earlier attempt was preempted or lost (the run sees ``LAKESHORE_PREEMPTED=1``)
    preempted: bool = False
    #: earlier attempts of any outcome; ``None``: not known (every earlier delivery was one)
    executions: int | None = 0

    def attempt(self, epoch: int) -> int:
        """The number of the claim ``epoch``'s attempt among those that count (1-based)."""
        return (epoch - 1 if self.counted is None else self.counted) + 1

    def number(self, epoch: int) -> int:
        """The claim ``epoch``'s attempt number among all (1-based): ``LAKESHORE_ATTEMPT``,
        its log's. A hand-back raises the delivery count, not this."""
        return (epoch - 1 if self.executions is None else self.executions) + 1


#: A first delivery's: nothing before it.
FIRST = Earlier()
#: A redelivery's when the control plane does not answer.
UNKNOWN = Earlier(counted=None, executions=None)


def should_retry(attempt: int, max_attempts: int) -> bool:
    """Whether a failed attempt, the ``attempt``-th that counts (1-based), leaves another
    one to run."""
    return attempt < max_attempts


def backoff_s(epoch: int) -> float:
    """Delay before the attempt after ``epoch``: 1, 2, 4 … seconds, capped at 60.

    Args:
        epoch: the failed attempt, 1-based (among those that count).

    Returns:
        The ``nak`` delay in seconds.
    """
    # min() on the exponent first, so a huge epoch never builds a huge float.
    return min(MAX_BACKOFF_S, 2.0 ** min(max(epoch, 1) - 1, 16))


async def persist(
    step: Callable[[], Awaitable[T]],
    *,
    within_s: float,
    what: str,
    give_up: Callable[[], bool] = lambda: False,
) -> T:
    """``await step()``, tried again while it raises :class:`~lakeshore.errors.Unavailable`
    (the connection is being re-established: a re-grant, a NATS node's loss), for up to
    ``within_s`` and until ``give_up()``; then its last error is raised.

    A finished run's result is worth a few tries: left unsettled, the claim waits a whole
    ``ack_wait`` for its redelivery and runs again.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    pause = FIRST_PAUSE_S
    while True:
        try:
            return await step()
        except Unavailable as e:
            if loop.time() + pause > deadline or give_up():
                raise
            log.info("%s: %s; trying again in %.1f s", what, e, pause)
            await asyncio.sleep(pause)
            pause = min(2 * pause, LONGEST_PAUSE_S)
