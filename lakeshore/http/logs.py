"""``GET /v1/namespaces/:ns/jobs/:id/logs``: a job's live log, streamed as NDJSON.

One JSON object per line (:mod:`lakeshore.model.logs`): ``chunk`` lines with the output,
an ``attempt`` line when a follow moves on to a retry, and an ``end`` line last with the
job's state. The namespace and the job are checked before the answer starts, so another
org's job, or an unknown one, is a 404 like on every job route; a bad parameter is a 400
naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec
from aiohttp import web

from lakeshore.errors import Invalid, LakeshoreError, Unavailable
from lakeshore.http import query
from lakeshore.http.auth import namespace
from lakeshore.http.routes import Routes
from lakeshore.http.state import LOGS
from lakeshore.services.logs import LogQuery

log = logging.getLogger(__name__)

routes = Routes()
PATH = "/v1/namespaces/{ns}/jobs/{id}/logs"
#: The answer's content type: newline-delimited JSON.
NDJSON = "application/x-ndjson"
#: Largest ``attempt``, ``after`` and ``tail`` taken.
MAX_COUNT = 2**53
#: How often a streamed answer looks whether its client is still there (seconds).
GONE_POLL_S = 1.0
_encoder = msgspec.json.Encoder()


def _count(request: web.Request, key: str, least: int) -> int | None:
    """``?<key>=`` a whole number from ``least`` (absent or empty: ``None``)."""
    raw = request.query.get(key)
    if not raw:
        return None
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or not least <= int(text) <= MAX_COUNT:
        raise Invalid(f"{key} must be a whole number from {least}, got {raw!r}")
    return int(text)


def _query(request: web.Request) -> LogQuery:
    stream = request.query.get("stream") or None
    if stream not in (None, "out", "err"):
        raise Invalid(f"stream must be out or err, got {stream!r}")
    return LogQuery(
        attempt=_count(request, "attempt", 1),
        follow=query.flag(request, "follow"),
        after=_count(request, "after", 0) or 0,
        tail=_count(request, "tail", 0),
        stream=stream,  # type: ignore[arg-type]
    )


@routes.route(
    "GET", PATH,
    "A job's live log as NDJSON: what is stored, then (follow=true) what comes, attempt "
    "after attempt, until the job ends",
    query=("attempt", "follow", "after", "tail", "stream"),
)  # fmt: skip
async def job_logs(request: web.Request) -> web.StreamResponse:
    ns = await namespace(request)
    asked = _query(request)
    service = request.app.get(LOGS)
    if service is None:
        raise Unavailable("this control plane serves no logs")
    lines = await service.lines(ns.name, request.match_info["id"], asked)
    resp = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-store"})
    await resp.prepare(request)

    async def send() -> None:
        async with contextlib.aclosing(lines) as it:  # type: ignore[type-var]
            async for line in it:
                await resp.write(_encoder.encode(line) + b"\n")

    # aiohttp does not stop a handler whose client left; a follow of a quiet job writes
    # nothing for long, so the connection is watched.
    sending = asyncio.create_task(send(), name=f"logs {request.match_info['id']}")
    watching = asyncio.create_task(_gone(request), name="logs reader watch")
    try:
        await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sending, watching):
            task.cancel()
        await asyncio.gather(sending, watching, return_exceptions=True)
    if not sending.cancelled() and (e := sending.exception()) is not None:
        if isinstance(e, LakeshoreError):
            # The answer has begun: its status cannot change. It ends without its end
            # line, which the client takes for a cut answer.
            log.warning("log of job %s cut: %s", request.match_info["id"], e)
        elif not isinstance(e, ConnectionError):
            raise e
        return resp
    if sending.done() and not sending.cancelled():
        await resp.write_eof()
    return resp


async def _gone(request: web.Request) -> None:
    """Return once the client's connection is closed."""
    while request.transport is not None and not request.transport.is_closing():
        await asyncio.sleep(GONE_POLL_S)
