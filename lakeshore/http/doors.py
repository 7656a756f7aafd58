"""The API's listener: one port, serving whichever app the control plane's role calls for.

A leader serves the whole API; a standby the :mod:`~lakeshore.http.standby` app. When the
role changes, the new app starts listening on the same port (``SO_REUSEPORT``) before the
old one stops listening, so the port never refuses a connection. The old app keeps its
open connections for :data:`RETIRE_S` (longer than clients keep an idle one: aiohttp's
pool 15 s): closing a kept-alive connection as a client sends on it would cut that request.
Meanwhile it answers ``not_leader`` with ``Connection: close``, so each client moves to a
new connection, served by the new app; what is left after that is closed, requests still
running given :data:`SWAP_GRACE_S`. Every connection keeps the read deadlines of
:mod:`lakeshore.http.deadlines`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from lakeshore.http.deadlines import GuardedRunner, ReadTimeouts
from lakeshore.http.errors import MAX_LINE_BYTES

#: How long requests of the app being replaced may still run once it is closed (seconds).
SWAP_GRACE_S = 2.0
#: How long the replaced app keeps the connections it has (seconds).
RETIRE_S = 20.0
#: The read deadlines of a listener told none (the settings' defaults).
DEFAULT_TIMEOUTS = ReadTimeouts()


class Doors:
    """Args:
    host, port: where to listen (port 0: a free one, kept across swaps).
    app_now: the app to serve now (asked at every :meth:`refresh`).
    timeouts: how long a connection may take to send a request's headers, and a body may
        stall.
    """

    def __init__(
        self,
        host: str,
        port: int,
        app_now: Callable[[], web.Application],
        *,
        timeouts: ReadTimeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.host, self.port = host, port
        self._app_now = app_now
        self._timeouts = timeouts
        self._app: web.Application | None = None
        self._runner: web.AppRunner | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._retiring: dict[web.AppRunner, asyncio.Task[None]] = {}

    async def refresh(self) -> None:
        """Serve ``app_now()`` if it is not the app served already (after :meth:`close`:
        nothing)."""
        async with self._lock:
            app = self._app_now()
            if app is self._app or self._closed:
                return
            runner = GuardedRunner(
                app,
                timeouts=self._timeouts,
                handle_signals=False,
                access_log=None,
                max_line_size=MAX_LINE_BYTES,
                shutdown_timeout=SWAP_GRACE_S,
            )
            await runner.setup()
            try:
                await web.TCPSite(runner, self.host, self.port, reuse_port=True).start()
            except BaseException:
                await runner.cleanup()
                raise
            self.port = runner.addresses[0][1]
            old, self._runner, self._app = self._runner, runner, app
            if old is not None:
                for site in list(old.sites):
                    await site.stop()  # no new connection goes to it
                self._retiring[old] = asyncio.create_task(self._retire(old))

    async def _retire(self, runner: web.AppRunner) -> None:
        try:
            await asyncio.sleep(RETIRE_S)
        finally:
            self._retiring.pop(runner, None)
            await runner.cleanup()

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            runner, self._runner, self._app = self._runner, None, None
            retiring = list(self._retiring.values())
            for task in retiring:
                task.cancel()  # its cleanup runs now
            await asyncio.gather(*retiring, return_exceptions=True)
            if runner is not None:
                await runner.cleanup()
