"""Health and the OpenAPI document, both answered without a token."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web
from msgspec import Struct

from lakeshore import __version__
from lakeshore.errors import Degraded
from lakeshore.http.routes import RouteDoc, Routes, reply
from lakeshore.http.state import PROBLEMS, REPLICA
from lakeshore.model import ErrorBody

routes = Routes()


class Health(Struct, frozen=True, kw_only=True):
    status: str
    version: str
    #: the state stream's sequence this control plane's file has applied
    applied_seq: int | None = None


@routes.route(
    "GET",
    "/v1/healthz",
    "Ready: NATS connected, the store open and every actor up (503 degraded names what is not)",
    answer=Health,
    public=True,
)
async def healthz(request: web.Request) -> web.Response:
    problems = request.app[PROBLEMS]()
    if problems:
        raise Degraded(problems)
    _, applied = request.app[REPLICA]()
    return reply(Health(status="ok", version=__version__, applied_seq=applied))


class Ready(Struct, frozen=True, kw_only=True):
    role: str
    version: str
    #: the leadership term (strictly increasing over the leaders)
    epoch: int
    applied_seq: int


@routes.route(
    "GET",
    "/readyz",
    "Whether this control plane leads and so takes requests (a standby answers 503 "
    "not_leader with the leader's URL): for load balancers",
    answer=Ready,
    public=True,
)
async def readyz(request: web.Request) -> web.Response:
    epoch, applied = request.app[REPLICA]()
    return reply(Ready(role="leader", version=__version__, epoch=epoch, applied_seq=applied))


@routes.route("GET", "/v1/openapi.json", "This document", public=True)
async def openapi(request: web.Request) -> web.Response:
    return reply(request.app[OPENAPI])


OPENAPI: web.AppKey[dict[str, Any]] = web.AppKey("openapi")

_ERROR_STATUSES = {
    "400": "invalid input",
    "401": "no or bad token",
    "403": "other org",
    "404": "not found",
    "409": "state conflict",
    "429": "a full queue, or over a quota (the error names it and its value)",
    "503": "NATS unavailable, or this control plane is a standby (not_leader, with "
    "leader_url and Retry-After)",
}


def build_openapi(docs: list[RouteDoc]) -> dict[str, Any]:
    """An OpenAPI 3.1 document of every declared route, schemas from the msgspec types."""
    types = {t for d in docs for t in (d.body, d.answer) if t is not None} | {ErrorBody}
    ordered = sorted(types, key=lambda t: t.__name__)
    schemas, components = msgspec.json.schema_components(
        ordered, ref_template="#/components/schemas/{name}"
    )
    ref = dict(zip(ordered, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for d in docs:
        op: dict[str, Any] = {"summary": d.summary, "responses": {}}
        params = [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in _path_params(d.path)
        ]
        params += [
            {"name": q, "in": "query", "required": False, "schema": {"type": "string"}}
            for q in d.query
        ]
        if params:
            op["parameters"] = params
        if d.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref[d.body]}},
            }
        answer: dict[str, Any] = {"description": "success"}
        if d.answer is not None:
            answer["content"] = {"application/json": {"schema": ref[d.answer]}}
        op["responses"][str(d.status)] = answer
        errors = {"503": _ERROR_STATUSES["503"]} if d.public else _ERROR_STATUSES
        for status, why in errors.items():
            op["responses"][status] = {
                "description": why,
                "content": {"application/json": {"schema": ref[ErrorBody]}},
            }
        if not d.public:
            op["security"] = [{"bearer": []}]
        paths.setdefault(d.path, {})[d.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Lakeshore", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]
