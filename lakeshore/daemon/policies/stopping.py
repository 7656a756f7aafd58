"""Stop policy: a stopped run gets SIGTERM, up to ``stop_grace_s`` to exit, then SIGKILL.

A run is stopped by a cancel order, its timeout, or its daemon stopping (a drain past its
timeout, a second signal). The signals go to all of the run's processes
(:class:`~lakeshore.daemon.reaper.RunProcesses`); the grace ends when the run's *main*
process exits, whatever its descendants still do (they are killed once it has: the run is
over). A grace of 0 sends SIGKILL alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass

from lakeshore.model import RemoteError

#: The error type of a cancelled invocation's result (the SDK raises ``JobCancelled``).
CANCELLED_TYPE = "lakeshore.Cancelled"
#: Longest wait for a SIGKILLed main process to be reaped (seconds): the kernel ends it at
#: once unless it is stuck in an uninterruptible wait, which no signal ends.
KILL_WAIT_S = 5.0
#: How long a run's pipes may still deliver once its main process has exited or answered
#: (seconds): what it wrote last is read, a descendant that holds them is not waited for.
DRAIN_S = 0.2


@dataclass(frozen=True, slots=True)
class Stopped:
    """How a stopped run's main process ended."""

    #: the run's ``stop_grace_s``
    grace_s: float
    #: from the first signal to the main process's exit (seconds)
    after_s: float
    #: the grace ran out (or was 0): SIGKILL ended it
    killed: bool

    def describe(self) -> str:
        """E.g. ``SIGTERM, then SIGKILL after the 1 s grace``."""
        if not self.killed:
            return f"SIGTERM, then it exited after {self.after_s:.1f} s"
        if self.grace_s == 0:
            return "SIGKILL at once (stop_grace_s 0)"
        return f"SIGTERM, then SIGKILL after the {self.grace_s:g} s grace"


async def stop(
    send: Callable[[int], None],
    exited: asyncio.Event,
    grace_s: float,
    on_term: Callable[[float], None] | None = None,
) -> Stopped:
    """SIGTERM, wait up to ``grace_s`` for ``exited``, then SIGKILL and wait for it again.

    Args:
        send: signals every process of the run.
        exited: set once the run's main process has exited.
        grace_s: seconds between SIGTERM and SIGKILL.
        on_term: called with ``grace_s`` once SIGTERM is sent (not when there is no grace).

    Returns:
        How it ended. A main process that outlives even SIGKILL by :data:`KILL_WAIT_S`
        is reported killed all the same (the caller gives up on it).
    """
    loop = asyncio.get_running_loop()
    began = loop.time()
    if grace_s > 0:
        send(signal.SIGTERM)
        if on_term is not None:
            on_term(grace_s)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                await exited.wait()
        if exited.is_set():
            return Stopped(grace_s=grace_s, after_s=loop.time() - began, killed=False)
    send(signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(KILL_WAIT_S):
            await exited.wait()
    return Stopped(grace_s=grace_s, after_s=loop.time() - began, killed=True)


def how_stopped(stopped: Stopped | None, *, inline: bool) -> str:
    """How a stopped run ended, as its error says it: an inline function's thread cannot be
    stopped (its result is discarded); a process is :meth:`Stopped.describe`-d."""
    if inline:
        return "an inline run's thread runs on, its result discarded"
    if stopped is None:
        return "stopped as it started"
    return stopped.describe()


def cancelled_error(how: str) -> RemoteError:
    """The error a cancelled run records; ``how`` from :func:`how_stopped`."""
    return RemoteError(type=CANCELLED_TYPE, message=f"cancelled while running; {how}")
