"""Org visibility and the org × token matrix."""

from __future__ import annotations

import pytest


async def _setup(api):
    """Org acme: alice, bob; org globex: carol. A token for alice and one for carol."""
    for ns, org in [("alice", "acme"), ("bob", "acme"), ("carol", "globex")]:
        status, _ = await api.post("/v1/namespaces", {"name": ns, "org": org})
        assert status == 201
    alice = (await api.post("/v1/namespaces/alice/tokens", {"description": "ci"}))[1]["token"]
    carol = (await api.post("/v1/namespaces/carol/tokens", {}))[1]["token"]
    return alice, carol


async def test_ls_aggregates_the_org_and_stamps_the_namespace(api):
    await _setup(api)
    await api.post("/v1/namespaces/alice/queues", {"name": "inference"})
    await api.post("/v1/namespaces/bob/queues", {"name": "inference", "description": "bob's"})
    await api.post("/v1/namespaces/carol/queues", {"name": "secret"})
    status, body = await api.get("/v1/namespaces/alice/queues")
    assert status == 200
    rows = {(q["namespace"], q["name"]) for q in body["queues"]}
    assert rows == {("alice", "default"), ("alice", "inference"), ("bob", "inference")}
    bobs = [q for q in body["queues"] if q["namespace"] == "bob"]
    assert bobs[0]["description"] == "bob's"


async def test_same_named_queues_in_sibling_namespaces_are_distinct(api):
    await _setup(api)
    await api.post("/v1/namespaces/alice/queues", {"name": "inference"})
    await api.post("/v1/namespaces/bob/queues", {"name": "inference"})
    await api.post("/v1/namespaces/bob/queues/inference/archive")
    assert (await api.get("/v1/namespaces/alice/queues/inference"))[1]["state"] == "active"
    assert (await api.get("/v1/namespaces/bob/queues/inference"))[1]["state"] == "archived"
    await api.delete("/v1/namespaces/bob/queues/inference")
    assert (await api.get("/v1/namespaces/alice/queues/inference"))[0] == 200


ROUTES = [
    ("GET", "/v1/namespaces/{ns}/queues", None),
    ("GET", "/v1/namespaces/{ns}/queues/inference", None),
    ("GET", "/v1/namespaces/{ns}/queues/inference/stats", None),
    ("GET", "/v1/namespaces/{ns}/queues/inference/events", None),
    ("PATCH", "/v1/namespaces/{ns}/queues/inference", {"description": "x"}),
    ("POST", "/v1/namespaces/{ns}/queues/inference/drain", None),
    ("POST", "/v1/namespaces/{ns}/queues", {"name": "new-one"}),
    ("GET", "/v1/namespaces/{ns}/workers", None),
    ("GET", "/v1/namespaces/{ns}", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_org_token_matrix(api, method, path, body):
    alice, carol = await _setup(api)
    for ns in ("alice", "bob", "carol"):
        await api.post(f"/v1/namespaces/{ns}/queues", {"name": "inference"})
    expect = {
        (alice, "alice"): 2,
        (alice, "bob"): 2,
        (alice, "carol"): 403,
        (carol, "carol"): 2,
        (carol, "alice"): 403,
        (carol, "bob"): 403,
        (None, "alice"): 401,
        ("lsk_bogus", "alice"): 401,
    }
    for (token, ns), want in expect.items():
        status, answer = await api.request(method, path.format(ns=ns), json=body, token=token)
        assert (status // 100 if want == 2 else status) == want, (token, ns, answer)
        if want == 403:
            assert answer["error"]["code"] == "forbidden"
        if want == 401:
            assert answer["error"]["code"] == "unauthorized"


async def test_a_sibling_namespace_in_the_path(api):
    alice, _ = await _setup(api)
    await api.post("/v1/namespaces/bob/queues", {"name": "inference"})
    status, body = await api.request("GET", "/v1/namespaces/bob/queues/inference", token=alice)
    assert status == 200 and body["namespace"] == "bob"


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("GET", ""),
        ("POST", ""),
        ("GET", "/q"),
        ("PATCH", "/q"),
        ("DELETE", "/q"),
        ("POST", "/q/archive"),
        ("POST", "/q/unarchive"),
        ("POST", "/q/drain"),
        ("GET", "/q/events"),
        ("GET", "/q/stats"),
    ],
)
async def test_unknown_namespace_is_a_404_and_is_not_created(api, method, suffix):
    body = {"name": "q"} if (method, suffix) == ("POST", "") else {}
    status, answer = await api.request(method, "/v1/namespaces/nowhere/queues" + suffix, json=body)
    assert status == 404 and answer["error"]["code"] == "namespace_not_found"
    assert (await api.get("/v1/namespaces/nowhere"))[0] == 404
    names = [n["name"] for n in (await api.get("/v1/namespaces"))[1]["namespaces"]]
    assert "nowhere" not in names


async def test_membership_route_of_an_unknown_namespace_is_a_404(api):
    status, answer = await api.post("/v1/namespaces/nowhere/workers/w/queues", {"add": []})
    assert status == 404 and answer["error"]["code"] == "namespace_not_found"


async def test_tokens_list_and_revoke(api):
    alice, _ = await _setup(api)
    tokens = (await api.get("/v1/namespaces/alice/tokens"))[1]["tokens"]
    assert len(tokens) == 1 and tokens[0]["description"] == "ci"
    assert "token" not in tokens[0] and "hash" not in tokens[0]
    status, _ = await api.request("GET", "/v1/namespaces/alice/queues", token=alice)
    assert status == 200
    status, body = await api.delete(f"/v1/namespaces/alice/tokens/{tokens[0]['id']}")
    assert status == 200
    status, body = await api.request("GET", "/v1/namespaces/alice/queues", token=alice)
    assert status == 401
    status, body = await api.delete(f"/v1/namespaces/alice/tokens/{tokens[0]['id']}")
    assert status == 404


async def test_namespaces_are_created_in_the_callers_org(api):
    alice, _ = await _setup(api)
    status, body = await api.request("POST", "/v1/namespaces", json={"name": "dave"}, token=alice)
    assert status == 201 and body["org"] == "acme"
    status, body = await api.request(
        "POST", "/v1/namespaces", json={"name": "eve", "org": "globex"}, token=alice
    )
    assert status == 403
    names = [
        n["name"]
        for n in (await api.request("GET", "/v1/namespaces", token=alice))[1]["namespaces"]
    ]
    assert names == ["alice", "bob", "dave"]
    status, body = await api.post("/v1/namespaces", {"name": "alice", "org": "acme"})
    assert status == 409
    status, body = await api.post("/v1/namespaces", {"name": "Bad"})
    assert status == 400
