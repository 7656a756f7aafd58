"""``/v1/namespaces/:ns/code/:digest``: an org's code snapshots (spec/code.md).

``PUT`` uploads a snapshot's tar (:mod:`lakeshore.code.snapshot`) under its digest: 201 when
it is stored, 200 when it already was; checked whole first (digest, plain files, the
server's bounds: 413 naming its size and largest files), so a refused upload stores
nothing. ``GET`` shows one, or lists them, with how the org's jobs use each. The namespace
in the path is the caller's way in: snapshots belong to its org, so every namespace of the
org reaches them and no other org does.
"""

from __future__ import annotations

import re

from aiohttp import web

from lakeshore.errors import Invalid, Unavailable
from lakeshore.http.auth import namespace
from lakeshore.http.routes import Routes, reply
from lakeshore.http.state import CODE
from lakeshore.model import CodeInfo, CodeList
from lakeshore.model.code import DIGEST_PATTERN
from lakeshore.services.code import CodeService

routes = Routes()
BASE = "/v1/namespaces/{ns}/code"
PATH = BASE + "/{digest}"
#: Bytes read from an upload at a time.
READ_CHUNK = 256 * 1024


def _service(request: web.Request) -> CodeService:
    service = request.app.get(CODE)
    if service is None:
        raise Unavailable("this control plane stores no code snapshots")
    return service


def _digest(request: web.Request) -> str:
    digest = request.match_info["digest"]
    if not re.match(DIGEST_PATTERN, digest):
        raise Invalid(
            f"{digest[:80]!r} is not a snapshot's digest: sha256: and 64 lowercase hex digits"
        )
    return digest


@routes.route(
    "GET", BASE, "The code snapshots of the namespace's org, the most recently used first",
    answer=CodeList,
)  # fmt: skip
async def listing(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(CodeList(snapshots=await _service(request).list(ns.org)))


@routes.route("GET", PATH, "One code snapshot of the namespace's org", answer=CodeInfo)
async def show(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(await _service(request).show_used(ns.org, _digest(request)))


@routes.route(
    "PUT", PATH,
    "Upload a code snapshot (its tar as the body): 201 stored, 200 already stored",
    answer=CodeInfo, status=201,
)  # fmt: skip
async def upload(request: web.Request) -> web.Response:
    ns = await namespace(request)
    digest = _digest(request)
    info, created = await _service(request).put(
        ns.org, digest, request.content.iter_chunked(READ_CHUNK), request.content_length
    )
    return reply(info, status=201 if created else 200)
