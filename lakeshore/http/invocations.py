"""Submitting invocations to a queue (one, or a batch)."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from lakeshore.actors.directory import Lookup
from lakeshore.actors.queue import Submit
from lakeshore.errors import Invalid
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, reply
from lakeshore.http.state import PLANE
from lakeshore.model import InvocationSubmit, SubmitAnswer, SubmitBatch, validate_name

routes = Routes()

#: Longest a submit to a ``block`` queue may wait for room (seconds).
MAX_WAIT_S = 600.0


def parse_submit(body: Any) -> list[InvocationSubmit]:
    """One invocation, or ``{"invocations": [...]}``; msgspec's ``$.path`` in errors."""
    if isinstance(body, dict) and "invocations" in body:
        return msgspec.convert(body, SubmitBatch).invocations
    return [msgspec.convert(body, InvocationSubmit)]


def parse_wait(raw: str | None) -> float:
    if raw is None:
        return 30.0
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT_S:
        raise Invalid(f"wait_s must be a number of seconds from 0 to {MAX_WAIT_S:g}, got {raw!r}")
    return wait


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
    wait_s = parse_wait(request.query.get("wait_s"))
    plane = request.app[PLANE]
    ref = await plane.directory.ask(Lookup(ns.name, name))
    answer = await ref.ask(
        Submit(specs, caller(request).token_id, wait_s),
        timeout_s=wait_s + plane.settings.ask_timeout_s,
    )
    return reply(answer, status=202)
