"""Bounded shutdown: the control plane's exit stack, and the last resort of a stop.

A stop unwinds every piece in reverse (:class:`StopStack`, an ``AsyncExitStack`` whose
steps are bounded): a step that needs NATS — a resignation, a drain, a close — may wait on
a server that is gone or does not answer, and must not hold the steps after it (the store's
close last of all). A step that fails or runs out of time is said in one line and the next
one runs. What no bound inside the event loop can end (a task that swallows its
cancellation, a thread blocked in a resolver) is ended by :class:`ExitDeadline`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The longest one step of a stop may take (seconds): longer than the slowest step that
#: still makes progress (a provider's close: SIGTERM, 5 s, SIGKILL, 5 s).
STEP_S = 15.0
#: The exit status of a process whose stop ran out of time (:class:`ExitDeadline`).
EXIT_STATUS = 1


class StopStack(contextlib.AsyncExitStack):
    """An ``AsyncExitStack`` whose every async step is bounded by ``step_s`` and whose
    failures are logged, not raised: closing it goes through every step.

    Args:
        step_s: the longest one step may take (seconds).
    """

    def __init__(self, step_s: float = STEP_S) -> None:
        super().__init__()
        self.step_s = step_s

    def push_async_callback(
        self, callback: Callable[..., Awaitable[Any]], /, *args: Any, **kwds: Any
    ) -> Callable[..., Awaitable[Any]]:
        step = functools.partial(callback, *args, **kwds)
        what = getattr(callback, "__qualname__", repr(callback))
        super().push_async_callback(bounded, step, what, self.step_s)
        return callback

    async def enter_async_context(self, cm: contextlib.AbstractAsyncContextManager[_T]) -> _T:
        # Its exit runs as a bounded step (without the exception that ends the stack: the
        # stack's steps are callbacks, which never suppress one).
        entered = await type(cm).__aenter__(cm)
        self.push_async_callback(cm.__aexit__, None, None, None)
        return entered


async def bounded(step: Callable[[], Awaitable[Any]], what: str, timeout_s: float) -> None:
    """Run one step of a stop within ``timeout_s``; a failure or a timeout is logged.

    Raises:
        asyncio.CancelledError: the stop itself was cancelled.
    """
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            await step()
    except Exception as e:
        if deadline.expired():
            log.warning("stopping: %s did not end within %gs; going on", what, timeout_s)
        else:
            log.warning("stopping: %s failed (%s: %s); going on", what, type(e).__name__, e)


class ExitDeadline:
    """The last resort of a stop: once armed (:meth:`arm`), the process ends with
    :data:`EXIT_STATUS` when the time is up unless it has exited (or :meth:`cancel` was
    called) by then. A daemon thread: a process that ends in time is not held by it."""

    def __init__(self) -> None:
        self._timer: threading.Timer | None = None

    def arm(self, timeout_s: float, what: str) -> None:
        """Exit in ``timeout_s`` (seconds) unless cancelled; ``what`` ran out of time."""
        if self._timer is not None:
            return

        def now() -> None:
            log.error("%s did not end within %gs: exiting now", what, timeout_s)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(EXIT_STATUS)

        self._timer = threading.Timer(timeout_s, now)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        """The process goes on (or has stopped in time): no exit."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
