"""Retry policy: which failed attempts go back to the queue, and after how long.

The attempt number is the claim's epoch (JetStream's delivery count), so it survives a
daemon crash: a redelivered claim is a new attempt whoever runs it.
"""

from __future__ import annotations

#: Longest delay before a retried attempt is delivered again (seconds).
MAX_BACKOFF_S = 60.0


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
