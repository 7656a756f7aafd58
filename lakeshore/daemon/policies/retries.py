"""Retry policy: which failed attempts go back to the queue, and after how long.

The attempt number is the claim's epoch (JetStream's delivery count), so it survives a
daemon crash: a redelivered claim is a new attempt whoever runs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from lakeshore.errors import Unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Longest delay before a retried attempt is delivered again (seconds).
MAX_BACKOFF_S = 60.0
#: First and longest pause between two tries of a settling step (seconds).
FIRST_PAUSE_S, LONGEST_PAUSE_S = 0.1, 2.0


def should_retry(epoch: int, max_attempts: int) -> bool:
    """Whether a failed attempt ``epoch`` (1-based) leaves another one to run."""
    return epoch < max_attempts


def backoff_s(epoch: int) -> float:
    """Delay before the attempt after ``epoch``: 1, 2, 4 … seconds, capped at 60.

    Args:
        epoch: the failed attempt, 1-based.

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
