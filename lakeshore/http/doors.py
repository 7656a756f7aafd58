"""The API's listener: one port, serving whichever app the control plane's role calls for.

A leader serves the whole API; a standby the :mod:`~lakeshore.http.standby` app. When the
role changes, the new app starts listening on the same port (``SO_REUSEPORT``) before the
old one stops, so the port never refuses a connection; requests still running on the old
app get :data:`SWAP_GRACE_S` to finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from lakeshore.http.errors import MAX_LINE_BYTES

#: How long requests of the app being replaced may still run (seconds).
SWAP_GRACE_S = 2.0


class Doors:
    """Args:
    host, port: where to listen (port 0: a free one, kept across swaps).
    app_now: the app to serve now (asked at every :meth:`refresh`).
    """

    def __init__(self, host: str, port: int, app_now: Callable[[], web.Application]) -> None:
        self.host, self.port = host, port
        self._app_now = app_now
        self._app: web.Application | None = None
        self._runner: web.AppRunner | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def refresh(self) -> None:
        """Serve ``app_now()`` if it is not the app served already (after :meth:`close`:
        nothing)."""
        async with self._lock:
            app = self._app_now()
            if app is self._app or self._closed:
                return
            runner = web.AppRunner(
                app,
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
                await old.cleanup()

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            runner, self._runner, self._app = self._runner, None, None
            if runner is not None:
                await runner.cleanup()
