"""Synchronous use of the async :class:`~lakeshore.sdk.client.Client`, and its one default.

A plain script has no event loop, and a notebook's loop must not be blocked by the calls it
makes, so :func:`call` runs every coroutine of :mod:`lakeshore.sdk.udf` and
:mod:`lakeshore.sdk.invocation` on a private event loop in a daemon thread. The loop and the
client used on it are created on first use and closed when the interpreter exits (or by
:func:`configure`). This module's ``_STATE`` is the SDK's only process-wide state, and it
changes only through :func:`configure`.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from lakeshore.code.snapshot import directory_of
from lakeshore.config import ClientSettings, load_client_settings
from lakeshore.sdk.client import Client

T = TypeVar("T")

#: Bound on closing the client and stopping the loop at exit (seconds).
CLOSE_TIMEOUT_S = 5.0


class LoopThread:
    """An event loop running on its own daemon thread until :meth:`close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="lakeshore-sdk-loop", daemon=True
        )
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the future settles when it ends."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it (interrupting the wait cancels it).

        Raises:
            RuntimeError: called from the loop's own thread, where it would wait for ever.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a synchronous lakeshore call cannot run inside its own loop")
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``last`` (a clean-up), then stop the loop and join the thread, each bounded."""
        if last is not None:
            try:
                self.submit(last).result(CLOSE_TIMEOUT_S)
            except (TimeoutError, concurrent.futures.CancelledError):
                pass  # shutting down: a session that would not close is dropped
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()


class _State:
    """The default client (``None``: built from the settings on first use) and its loop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.settings: ClientSettings | None = None
        self.client: Client | None = None
        #: the directory shipped with every submit of a ``udf`` without a ``code`` of its own
        self.code: Path | None = None
        self.runner: LoopThread | None = None
        self.at_exit = False

    def current(self) -> tuple[Client, LoopThread]:
        with self.lock:
            if self.client is None:
                conf = self.settings or load_client_settings({})
                self.client = Client(conf.api, conf.token, conf.namespace)
            if self.runner is None:
                self.runner = LoopThread()
                if not self.at_exit:
                    atexit.register(close)
                    self.at_exit = True
            return self.client, self.runner


_STATE = _State()


def configure(
    client: Client | None = None,
    *,
    settings: ClientSettings | None = None,
    code: str | os.PathLike[str] | None = None,
) -> None:
    """Choose the API that ``udf`` functions and :class:`Invocation` handles talk to, and
    the code they run.

    Without a call, the first use builds a client from :func:`load_client_settings` with no
    flags: ``LAKESHORE_API`` / ``LAKESHORE_TOKEN`` / ``LAKESHORE_NAMESPACE``, then the
    config files (``./.lakeshore/config.toml`` that ``lakeshore server`` writes, …).

    Args:
        client: use this client. The SDK takes it over: it is used on the SDK's own loop
            thread and closed by the SDK, so do not also await it on a loop of yours.
        settings: build the client from these settings instead (ignored with ``client``).
            With neither, go back to the default above (read again on the next use).
        code: ship this directory (resolved now: ``"."`` is the current directory) with
            every submit of a ``udf`` that names no ``code`` of its own: its daemon runs it
            with the directory's snapshot first on ``sys.path`` and as its working directory
            (spec/code.md). ``None``: the daemon imports from its own path.

    Raises:
        Invalid: ``code`` is not a directory.

    The client used until now, if the SDK built or was given one, is closed.
    """
    shipped = None if code is None else directory_of(code)
    with _STATE.lock:
        old, runner = _STATE.client, _STATE.runner
        _STATE.client, _STATE.settings, _STATE.code = client, settings, shipped
    if old is not None and old is not client and runner is not None:
        runner.run(old.close())


def shipped_code() -> Path | None:
    """The directory :func:`configure` named for every submit (``None``: none)."""
    return _STATE.code


def call(make: Callable[[Client], Coroutine[Any, Any, T]]) -> T:
    """Run ``make(client)`` on the SDK's loop with the default client; wait for its value."""
    client, runner = _STATE.current()
    return runner.run(make(client))


async def acall(make: Callable[[Client], Coroutine[Any, Any, T]]) -> T:
    """:func:`call` for async callers: their loop awaits, the request runs on the SDK's."""
    client, runner = _STATE.current()
    # wrap_future passes a cancellation of the awaiting task on to the SDK's loop.
    return await asyncio.wrap_future(runner.submit(make(client)))


def close() -> None:
    """Close the default client and stop the SDK's loop (registered with ``atexit``).

    The next call starts a new loop; the client, whose session is gone, opens a new one.
    """
    with _STATE.lock:
        client, runner = _STATE.client, _STATE.runner
        _STATE.runner = None
    if runner is not None:
        runner.close(client.close() if client is not None else None)


__all__ = ["LoopThread", "acall", "call", "close", "configure"]
