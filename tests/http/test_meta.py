"""Health, the OpenAPI document and error rendering."""

from __future__ import annotations

import pytest

from lakeshore.http.app import ROUTE_MODULES


async def test_healthz_answers_without_a_token(api):
    status, body = await api.request("GET", "/v1/healthz", token=None)
    assert status == 200 and body["status"] == "ok"


async def test_openapi_lists_every_route(api):
    status, doc = await api.request("GET", "/v1/openapi.json", token=None)
    assert status == 200 and doc["openapi"].startswith("3.")
    declared = {(d.method.lower(), d.path) for m in ROUTE_MODULES for d in m.routes.docs}
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == declared
    seed = [
        ("post", "/v1/namespaces/{ns}/queues"),
        ("get", "/v1/namespaces/{ns}/queues"),
        ("get", "/v1/namespaces/{ns}/queues/{name}"),
        ("patch", "/v1/namespaces/{ns}/queues/{name}"),
        ("post", "/v1/namespaces/{ns}/queues/{name}/archive"),
        ("post", "/v1/namespaces/{ns}/queues/{name}/unarchive"),
        ("post", "/v1/namespaces/{ns}/queues/{name}/drain"),
        ("delete", "/v1/namespaces/{ns}/queues/{name}"),
        ("get", "/v1/namespaces/{ns}/queues/{name}/events"),
        ("get", "/v1/namespaces/{ns}/queues/{name}/stats"),
        ("post", "/v1/namespaces/{ns}/workers/{id}/queues"),
    ]
    assert set(seed) <= documented
    schema = doc["paths"]["/v1/namespaces/{ns}/queues"]["post"]["requestBody"]
    assert schema["content"]["application/json"]["schema"]["$ref"].endswith("QueueCreate")
    assert "Queue" in doc["components"]["schemas"]


async def test_unknown_route_and_method_are_json_errors(api):
    status, body = await api.get("/v1/nothing-here")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = await api.request("PUT", "/v1/namespaces/default/queues")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"


async def test_too_large_body_is_a_413(api):
    status, body = await api.request(
        "POST", "/v1/namespaces/default/queues", data=b"{" + b" " * (5 * 1024 * 1024) + b"}"
    )
    assert status == 413 and body["error"]["code"] == "too_large"


UNKNOWN_ROUTES = ["/v1/nope", "/v1/namespaces/x/bogus", "/v1/namespaces/default/queues/q/bogus"]


@pytest.mark.parametrize("path", UNKNOWN_ROUTES)
@pytest.mark.parametrize("token", ["admin", "lsk_bogus", None])
async def test_an_unknown_route_is_a_404_with_or_without_a_token(api, path, token):
    secret = api.token if token == "admin" else token
    status, body = await api.request("GET", path, token=secret)
    assert (status, body["error"]["code"]) == (404, "not_found"), body
    assert path in body["error"]["message"] and "/v1/openapi.json" in body["error"]["message"]


async def test_known_routes_still_ask_a_token(api):
    # An unknown namespace on a known route is refused before anything is looked up: a
    # caller without a token learns nothing about which namespaces exist.
    for path in ("/v1/namespaces/x/queues", "/v1/namespaces/default/queues/q/stats", "/metrics"):
        for token in (None, "lsk_bogus"):
            status, body = await api.request("GET", path, token=token)
            assert (status, body["error"]["code"]) == (401, "unauthorized"), (path, token)
    async with api._session.get(api.base + "/dashboard/app.js") as r:
        assert r.status == 200
    bearer = {"Authorization": f"Bearer {api.token}"}
    async with api._session.get(api.base + "/metrics", headers=bearer) as r:
        assert r.status == 200


async def test_a_method_its_path_lacks_is_a_405_without_a_token(api):
    status, body = await api.request("PUT", "/v1/namespaces/default/queues", token=None)
    assert (status, body["error"]["code"]) == (405, "method_not_allowed")
