"""Declaring a route once: aiohttp registration and its OpenAPI description together."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from aiohttp import web

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class RouteDoc:
    method: str
    path: str
    summary: str
    body: type | None
    answer: type | None
    status: int
    query: tuple[str, ...]
    public: bool


class Routes:
    """A resource module's routes: ``web.RouteTableDef`` plus what OpenAPI needs."""

    def __init__(self) -> None:
        self.table = web.RouteTableDef()
        self.docs: list[RouteDoc] = []

    def route(
        self,
        method: str,
        path: str,
        summary: str,
        *,
        body: type | None = None,
        answer: type | None = None,
        status: int = 200,
        query: tuple[str, ...] = (),
        public: bool = False,
    ) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.docs.append(RouteDoc(method, path, summary, body, answer, status, query, public))
            self.table.route(method, path)(handler)
            return handler

        return register


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


async def decode_body(request: web.Request, type_: type[T]) -> T:
    """Decode a JSON body into ``type_`` with a decoder built once per type.

    Raises:
        msgspec.ValidationError / msgspec.DecodeError: rendered as 400 by the middleware.
    """
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    raw = await request.read()
    return decoder.decode(raw or b"{}")


_encoder = msgspec.json.Encoder()


#: Bytes read from disk per write of a streamed file answer.
_FILE_CHUNK = 256 * 1024


async def stream_file(
    request: web.Request, path: Path, headers: dict[str, str]
) -> web.StreamResponse:
    """Answer the file at ``path`` with ``headers``, read off the event loop a chunk at a
    time (never whole into memory)."""
    resp = web.StreamResponse(headers=headers)
    resp.content_length = path.stat().st_size
    await resp.prepare(request)
    with path.open("rb") as f:
        while chunk := await asyncio.to_thread(f.read, _FILE_CHUNK):
            await resp.write(chunk)
    await resp.write_eof()
    return resp


def reply(payload: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=_encoder.encode(payload), status=status, content_type="application/json"
    )
