"""A read never creates anything: every ``GET`` on an unknown namespace is a 404 and leaves
the namespaces as they were. The provider routes' writes still create an unknown namespace
(the user's contract), within the org's ``namespaces_per_org``, as ``POST /v1/namespaces``
does: over it, 429 and nothing created."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from support import Api, PlaneHandle

from lakeshore.access import Access
from lakeshore.http.app import make_app
from lakeshore.quotas import Quotas

NOWHERE = "nowhere"
#: A value for each path parameter of the API but ``ns``.
PARAMS = {"name": "default", "id": "x", "digest": "sha256:" + "0" * 64}
ORG_LIMIT = 2


async def _namespaces(api: Api) -> list[tuple[str, str]]:
    status, body = await api.get("/v1/namespaces")
    assert status == 200, body
    return sorted((n["name"], n["org"]) for n in body["namespaces"])


async def _get_routes_of_a_namespace(api: Api) -> list[str]:
    """Every ``GET`` path of the API under ``/v1/namespaces/{ns}``, from its OpenAPI."""
    doc = (await api.get("/v1/openapi.json"))[1]
    paths = [p for p, ops in doc["paths"].items() if "get" in ops and "{ns}" in p]
    assert "/v1/namespaces/{ns}/providers" in paths
    return [
        re.sub(r"\{(\w+)\}", lambda m: NOWHERE if m[1] == "ns" else PARAMS[m[1]], p) for p in paths
    ]


async def test_a_get_of_an_unknown_namespaces_providers_is_404_and_creates_it_not(api) -> None:
    before = await _namespaces(api)
    for path in (
        f"/v1/namespaces/{NOWHERE}/providers",
        f"/v1/namespaces/{NOWHERE}/providers/local",
    ):
        status, body = await api.get(path)
        assert (status, body["error"]["code"]) == (404, "namespace_not_found"), (path, body)
        assert f"`lakeshore namespaces add {NOWHERE}" in body["error"]["message"]
    assert await _namespaces(api) == before
    assert (await api.get(f"/v1/namespaces/{NOWHERE}"))[0] == 404


async def test_no_get_route_creates_an_unknown_namespace_or_its_rows(
    api, control_plane: PlaneHandle
) -> None:
    before = await _namespaces(api)
    answered = {}
    for path in await _get_routes_of_a_namespace(api):
        status, body = await api.get(path)
        answered[path] = (status, body["error"]["code"] if status >= 400 else body)
    assert all(a == (404, "namespace_not_found") for a in answered.values()), answered
    assert await _namespaces(api) == before
    # Nor a default queue's row (queues ls / show default materialise it, in a namespace
    # that exists only).
    assert await control_plane.plane.parts.store.list_queues([NOWHERE]) == []


async def test_a_provider_write_creates_its_unknown_namespace_but_a_read_after_does_not(
    api,
) -> None:
    before = await _namespaces(api)
    body = {"name": "by-hand", "kind": "external"}
    assert (await api.post(f"/v1/namespaces/{NOWHERE}/providers", body))[0] == 201
    assert await _namespaces(api) == sorted([*before, (NOWHERE, "default")])
    status, listed = await api.get(f"/v1/namespaces/{NOWHERE}/providers")
    assert status == 200 and [p["name"] for p in listed["providers"]] == ["local", "by-hand"]


@pytest.fixture
async def tight(control_plane: PlaneHandle) -> AsyncIterator[Api]:
    """The control plane's API, served on its own port by an app whose namespaces are
    bounded at :data:`ORG_LIMIT` per org (the rest is the plane's own services)."""
    parts = control_plane.plane.parts
    access = Access(parts.store, quotas=Quotas(namespaces_per_org=ORG_LIMIT))
    app = make_app(dataclasses.replace(parts.services, access=access))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    api = Api(f"http://{host}:{port}", control_plane.admin_secret)
    try:
        yield api
    finally:
        await api.close()
        await runner.cleanup()


def _refused(answer: tuple[int, dict], org: str) -> None:
    status, body = answer
    assert status == 429, body
    assert body["error"]["code"] == "quota_exceeded"
    message = body["error"]["message"]
    assert f"over quota namespaces_per_org ({ORG_LIMIT})" in message, message
    assert f"org {org!r} has {ORG_LIMIT} namespace(s)" in message and "[quotas]" in message


async def test_namespaces_past_namespaces_per_org_are_refused_and_none_is_created(
    tight: Api, control_plane: PlaneHandle
) -> None:
    for name in ("a1", "a2"):
        assert (await tight.post("/v1/namespaces", {"name": name, "org": "acme"}))[0] == 201
    before = await _namespaces(tight)
    _refused(await tight.post("/v1/namespaces", {"name": "a3", "org": "acme"}), "acme")
    _, token = await tight.post("/v1/namespaces/a1/tokens", {})
    acme = Api(tight.base, token["token"])
    try:
        body = {"name": "by-hand", "kind": "external"}
        _refused(await acme.post("/v1/namespaces/a4/providers", body), "acme")
        assert (await acme.get("/v1/namespaces/a4/providers"))[0] == 404
    finally:
        await acme.close()
    assert await _namespaces(tight) == before
    assert await control_plane.plane.parts.store.get_namespace("a4") is None
    # The quota is per org: another org, and an existing name's answer, are as before.
    assert (await tight.post("/v1/namespaces", {"name": "g1", "org": "globex"}))[0] == 201
    assert (await tight.post("/v1/namespaces", {"name": "a1", "org": "acme"}))[0] == 409
