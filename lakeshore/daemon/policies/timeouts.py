"""Timeout policy: a run longer than the invocation's ``timeout_s`` is stopped and fails.

Stopping is cancellation of the run: the runner stops a command on cancellation
(:mod:`~lakeshore.daemon.policies.stopping`: SIGTERM, the grace, SIGKILL), and the
deadline's ``TimeoutError`` comes once it has; a function's thread cannot be killed, so
its result is discarded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from lakeshore.model import RemoteError

T = TypeVar("T")


class RunTimedOut(Exception):
    """The run was stopped at its deadline."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"timed out after {timeout_s:g} s")
        self.timeout_s = timeout_s


async def within(timeout_s: float | None, run: Awaitable[T]) -> T:
    """Await ``run``, cancelling it after ``timeout_s`` seconds (``None``: no limit).

    Raises:
        RunTimedOut: the deadline passed; ``run`` has been cancelled and awaited.
    """
    if timeout_s is None:
        return await run
    try:
        async with asyncio.timeout(timeout_s):
            return await run
    except TimeoutError:
        raise RunTimedOut(timeout_s) from None


def timed_out_error(err: RunTimedOut, how: str) -> RemoteError:
    """The error a timed-out attempt records: after how long, and ``how`` it was stopped
    (:func:`~lakeshore.daemon.policies.stopping.how_stopped`)."""
    return RemoteError(type="builtins.TimeoutError", message=f"{err}; {how}")
