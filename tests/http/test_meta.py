"""Health, the OpenAPI document and error rendering."""

from __future__ import annotations

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
