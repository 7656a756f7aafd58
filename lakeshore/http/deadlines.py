"""Read deadlines of the HTTP server: a request's headers in time, a body that never stalls.

aiohttp has neither. Its keep-alive timer closes a connection that sends nothing for a
long while, but one that sends a header byte every few seconds (slowloris) or stops in the
middle of a body is held as long as the client likes. :class:`GuardedRunner` is an
``AppRunner`` whose connections keep two deadlines:

- **headers**: a request's headers must be complete ``header_s`` after the connection
  opened, or, on a kept-alive connection, after the first byte of that request (an idle
  kept-alive connection is the keep-alive timer's: closing it as the client sends on it
  would cut that request). Past the deadline the connection is closed.
- **body**: a request body that brings no byte for ``body_s`` fails its reads with
  :exc:`BodyStalled`, which the error middleware answers 408 (closing the connection). The
  clock stops while the server itself holds the reading (a handler not reading yet).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadTimeouts:
    """The two deadlines, in seconds (``http_header_timeout_s``, ``http_body_timeout_s``)."""

    header_s: float = 10.0
    body_s: float = 30.0


class BodyStalled(TimeoutError):
    """A request body sent nothing for ``stalled_s`` seconds.

    A ``TimeoutError``: aiohttp drains what is left of an unread body after the answer, and
    stops draining, quietly, on a timeout.
    """

    def __init__(self, stalled_s: float) -> None:
        super().__init__(f"the request body sent nothing for {stalled_s:g}s")
        self.stalled_s = stalled_s


class GuardedRunner(web.AppRunner):
    """A ``web.AppRunner`` whose connections keep the deadlines of ``timeouts``.

    Args:
        app: the application to serve.
        timeouts: the header and body deadlines.
        kwargs: as ``web.AppRunner``'s.
    """

    __slots__ = ("_timeouts",)

    def __init__(self, app: web.Application, *, timeouts: ReadTimeouts, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._timeouts = timeouts

    async def _make_server(self) -> Server:
        made = await super()._make_server()
        # aiohttp has no hook for the protocol class: the server the app made is made again,
        # with the same arguments, as one whose connections are _GuardedHandlers.
        return _GuardedServer(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=made._loop,
            timeouts=self._timeouts,
            **made._kwargs,
        )


class _GuardedServer(Server):
    def __init__(self, handler: Any, *, timeouts: ReadTimeouts, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._timeouts = timeouts

    def __call__(self) -> RequestHandler:
        return _GuardedHandler(self, loop=self._loop, timeouts=self._timeouts, **self._kwargs)


class _GuardedHandler(RequestHandler):
    """One connection: aiohttp's protocol, with the header and body deadlines."""

    __slots__ = ("_timeouts", "_header_timer", "_body", "_body_seen", "_body_timer")

    def __init__(self, manager: Server, *, timeouts: ReadTimeouts, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._timeouts = timeouts
        self._header_timer: asyncio.TimerHandle | None = None
        #: the body being received, and when its last byte came (loop time)
        self._body: StreamReader | None = None
        self._body_seen = 0.0
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm_headers()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm_headers()
        self._forget_body()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        waiting = self._waiter is not None and not self._waiter.done()
        if data and waiting and self._header_timer is None:
            self._arm_headers()  # the first byte of a next request on a kept-alive connection
        if data and self._body is not None:
            self._body_seen = self._loop.time()
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed:  # a request's headers are in
            self._disarm_headers()
            if self._messages and not (body := self._messages[-1][1]).is_eof():
                self._watch_body(body)

    def resume_reading(self, resume_parser: bool = True) -> None:
        # The server held the reading: the client's silence until now does not count.
        self._body_seen = self._loop.time()
        super().resume_reading(resume_parser)

    def _arm_headers(self) -> None:
        self._disarm_headers()
        self._header_timer = self._loop.call_later(self._timeouts.header_s, self._headers_due)

    def _disarm_headers(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_due(self) -> None:
        self._header_timer = None
        if self.transport is None:
            return
        peer = self.transport.get_extra_info("peername")
        log.debug(
            "closed the connection from %s: no complete request headers within %gs",
            peer, self._timeouts.header_s,
        )  # fmt: skip
        self.force_close()

    def _watch_body(self, body: StreamReader) -> None:
        self._forget_body()
        self._body, self._body_seen = body, self._loop.time()
        self._body_timer = self._loop.call_later(self._timeouts.body_s, self._body_due)

    def _forget_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._body = None

    def _body_due(self) -> None:
        self._body_timer = None
        body = self._body
        if body is None or body.is_eof() or self.transport is None:
            self._body = None
            return
        now = self._loop.time()
        if self._reading_paused or self._buffer_paused:
            self._body_seen = now
        due = self._body_seen + self._timeouts.body_s
        if now < due:
            self._body_timer = self._loop.call_at(due, self._body_due)
            return
        self._body = None
        body.set_exception(BodyStalled(self._timeouts.body_s))
