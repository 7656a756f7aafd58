"""Hostile numbers, sizes and shapes: every one is a 4xx in the API's error shape that names
what was wrong, changes nothing, and never takes an actor down."""

from __future__ import annotations

import os
import stat

import pytest

Q = "/v1/namespaces/default/queues"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "y", "max_depth": 3_000_000_000}, "$.max_depth"),
        ({"name": "y", "max_depth": 2**63}, "$.max_depth"),
        ({"name": "y", "max_depth": -1}, "$.max_depth"),
        ({"name": "y", "elasticity": {"kind": "elastic", "max": 3 * 10**19}}, "$.elasticity.max"),
        ({"name": "y", "elasticity": {"target_pending": 10**12}}, "$.elasticity.target_pending"),
        ({"name": "y", "elasticity": {"steal_delay_s": 1e300}}, "$.elasticity.steal_delay_s"),
        ({"name": "y", "description": "x" * 5000}, "$.description"),
    ],
)
async def test_out_of_range_numbers_are_400_naming_the_field(api, body, field):
    for _ in range(12):  # more than the supervisor's restart budget: nothing may crash
        status, answer = await api.post(Q, body)
        assert (status, answer["error"]["code"]) == (400, "invalid"), answer
        assert field in answer["error"]["message"]
    assert (await api.get(Q + "/y"))[0] == 404
    assert (await api.get("/v1/healthz"))[0] == 200
    assert (await api.post(Q, {"name": "fine"}))[0] == 201


async def test_a_patch_out_of_range_changes_nothing(api):
    await api.post(Q, {"name": "q", "max_depth": 5})
    for patch in ({"max_depth": 2**31}, {"max_depth": 2**63}, {"elasticity": {"max": 10**20}}):
        status, body = await api.patch(Q + "/q", patch)
        assert status == 400, body
        assert "$." in body["error"]["message"]
    row = (await api.get(Q + "/q"))[1]
    assert (row["max_depth"], row["elasticity"]["max"]) == (5, 0)
    assert (await api.get("/v1/healthz"))[0] == 200


@pytest.mark.parametrize("raw", ["²", "٣", "1e3", "0", "1001", "-5", ""])
async def test_a_bad_limit_is_400(api, raw):
    status, body = await api.get(f"/v1/namespaces/default/jobs?limit={raw}")
    assert (status, body["error"]["code"]) == (400, "invalid")
    assert "limit must be an integer from 1 to 1000" in body["error"]["message"]


async def test_deeply_nested_json_is_400(api):
    await api.post(Q, {"name": "q"})
    deep = b'{"fn": "m:f", "args": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    status, body = await api.request("POST", Q + "/q/invocations", data=deep)
    assert (status, body["error"]["code"]) == (400, "invalid")
    nested = {"fn": "m:f", "args": [], "kwargs": {"x": [[[[[]]]]]}}
    for _ in range(70):
        nested["kwargs"] = {"x": nested["kwargs"]}
    status, body = await api.post(Q + "/q/invocations", nested)
    assert status == 400 and "nested more than 64" in body["error"]["message"]


async def test_a_long_url_is_414_in_the_error_shape(api):
    status, body = await api.get(Q + "/q?" + "x" * 9000)
    assert (status, body["error"]["code"]) == (414, "uri_too_long")


async def test_a_wrong_method_is_405_with_allow(api):
    async with api._session.request(
        "PUT", api.base + "/v1/healthz", headers={"Authorization": f"Bearer {api.token}"}
    ) as r:
        assert r.status == 405
        assert "GET" in r.headers["Allow"]
        assert (await r.json())["error"]["code"] == "method_not_allowed"


async def test_the_data_dir_is_private(control_plane):
    mode = stat.S_IMODE(os.stat(control_plane.data_dir).st_mode)
    assert mode == 0o700
