"""A TCP proxy a fault test puts between a daemon and nats-server, to cut the network.

Bytes pass through untouched. :meth:`TcpProxy.blackhole` is a silent partition: nothing is
closed, the proxy stops reading and holds what it had read, so TCP backpressure stalls both
ends as a dropped-packets network would (and what was held arrives on :meth:`heal`, as TCP
retransmits would deliver it). :meth:`reset` closes every connection with a RST, as a
firewall or NAT that forgot them would; clients then reconnect through the proxy (still cut
if it is blackholed).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct


class TcpProxy:
    """Forwards connections on a free loopback port to ``upstream_host:upstream_port``.

    Use as ``async with TcpProxy(host, port) as proxy:``; connect clients to
    :attr:`url`.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: connections accepted since start (reconnects show here)
        self.accepted = 0

    @property
    def port(self) -> int:
        assert self._server is not None, "the proxy is not started"
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def cut(self) -> bool:
        return not self._open.is_set()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def blackhole(self) -> None:
        """Stop forwarding in both directions without closing anything."""
        self._open.clear()

    def heal(self) -> None:
        """Forward again (what was held goes first)."""
        self._open.set()

    def reset(self) -> None:
        """Close every connection now, with a RST on both sides."""
        for client, upstream in list(self._conns):
            for writer in (client, upstream):
                _abort(writer)
        self._conns.clear()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self.reset()
        self.heal()  # a pump held at the gate must see its closed socket and end
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            _abort(writer)
            return
        pair = (writer, up_writer)
        self._conns.add(pair)
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # One side ended: end the other, as a real connection would.
            for w in pair:
                _abort(w)
            self._conns.discard(pair)
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                await self._open.wait()
                if writer.is_closing():
                    return
                writer.write(data)
                await writer.drain()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a RST (SO_LINGER 0), not a FIN: the peer sees a reset connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None and not writer.is_closing():
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
