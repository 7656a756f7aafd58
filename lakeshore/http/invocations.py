"""Submitting invocations to a queue (one, or a batch): thin over the JobService."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from lakeshore.http import query
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, reply
from lakeshore.http.state import JOBS
from lakeshore.model import InvocationSubmit, SubmitAnswer, SubmitBatch, validate_name

routes = Routes()

#: Longest a submit to a ``block`` queue may wait for room (seconds).
MAX_WAIT_S = 600.0
#: How long a submit to a full ``block`` queue waits for room by default (seconds).
DEFAULT_WAIT_S = 30.0


def parse_submit(body: Any) -> list[InvocationSubmit]:
    """One invocation, or ``{"invocations": [...]}``; msgspec's ``$.path`` in errors."""
    if isinstance(body, dict) and "invocations" in body:
        return msgspec.convert(body, SubmitBatch).invocations
    return [msgspec.convert(body, InvocationSubmit)]


@routes.route(
    "POST",
    "/v1/namespaces/{ns}/queues/{name}/invocations",
    "Submit one invocation or a batch",
    body=SubmitBatch,
    answer=SubmitAnswer,
    status=202,
    query=("wait_s",),
)
async def submit(request: web.Request) -> web.Response:
    ns = await namespace(request)
    name = validate_name("queue", request.match_info["name"])
    specs = parse_submit(msgspec.json.decode(await request.read() or b"null"))
    wait_s = query.seconds(request, "wait_s", default=DEFAULT_WAIT_S, most=MAX_WAIT_S)
    answer = await request.app[JOBS].submit(
        ns.name, name, specs, actor=caller(request).token_id, wait_s=wait_s
    )
    return reply(answer, status=202)
