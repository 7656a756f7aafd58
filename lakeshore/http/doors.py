"""The API's listener: one port, serving whichever app the control plane's role calls for.

A leader serves the whole API; a standby the :mod:`~lakeshore.http.standby` app. The
listening sockets are made once and outlive every app: each app accepts from a copy of them
(``dup``), so when the role changes the new app starts accepting before the old one stops,
and a connection waiting to be accepted stays queued in the one socket whichever app takes
it. (A listener of each app's own, sharing the port by ``SO_REUSEPORT``, would drop the
connections queued in the old one when it closes: their clients would wait out TCP's
retransmissions, seconds, for a reset.) The old app keeps its
open connections for :data:`RETIRE_S` (longer than clients keep an idle one: aiohttp's
pool 15 s): closing a kept-alive connection as a client sends on it would cut that request.
Meanwhile it answers ``not_leader`` with ``Connection: close``, so each client moves to a
new connection, served by the new app; what is left after that is closed, requests still
running given :data:`SWAP_GRACE_S`. Every connection keeps the read deadlines of
:mod:`lakeshore.http.deadlines`.
"""

from __future__ import annotations

import asyncio
import socket
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
#: Connections a listening socket queues before they are accepted (aiohttp's default).
BACKLOG = 128


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
        self._sockets: list[socket.socket] = []
        #: each serving app's copies of the listening sockets
        self._copies: dict[web.AppRunner, list[socket.socket]] = {}

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
            copies = [sock.dup() for sock in self._listening()]
            try:
                for copy in copies:
                    await web.SockSite(runner, copy).start()
            except BaseException:
                await runner.cleanup()
                for copy in copies:
                    copy.close()
                raise
            old, self._runner, self._app = self._runner, runner, app
            self._copies[runner] = copies
            if old is not None:
                # It accepts no more, but is not closed yet: a connection it has just
                # accepted is still being handed to it (asyncio attaches it in a task of
                # its own, and would leave it unanswered if the server were closed
                # meanwhile). Closed when it retires.
                loop = asyncio.get_running_loop()
                for copy in self._copies.pop(old, []):
                    loop.remove_reader(copy.fileno())
                self._retiring[old] = asyncio.create_task(self._retire(old))

    def _listening(self) -> list[socket.socket]:
        """The listening sockets, made at the first call: one per address ``host`` resolves
        to, all on one port (the first one's, when ``port`` is 0)."""
        if self._sockets:
            return self._sockets
        infos = socket.getaddrinfo(
            self.host or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        port = self.port
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((address[0], port, *address[2:]))
                sock.listen(BACKLOG)
                sock.setblocking(False)
                port = sock.getsockname()[1]
        except BaseException:
            self._close_sockets()
            raise
        self.port = port
        return self._sockets

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []

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
            self._close_sockets()
