"""Provider routes: CRUD, the built-in ``local``, and namespace auto-creation."""

from __future__ import annotations

import pytest

P = "/v1/namespaces/default/providers"


async def test_every_namespace_lists_the_built_in_local_provider(api):
    status, body = await api.get(P)
    assert status == 200
    [builtin] = body["providers"]
    assert (builtin["name"], builtin["kind"], builtin["config"]) == ("local", "local", {})
    assert (await api.get(f"{P}/local"))[1] == builtin


async def test_add_show_list_and_delete_a_provider(api):
    status, row = await api.post(
        P, {"name": "my-cpu", "kind": "local", "config": {"concurrency": "4"}}
    )
    assert status == 201, row
    assert (row["name"], row["namespace"], row["kind"]) == ("my-cpu", "default", "local")
    assert row["config"] == {"concurrency": "4"} and row["created_at"]
    assert (await api.post(P, {"name": "my-ec2", "kind": "external"}))[0] == 201
    names = [p["name"] for p in (await api.get(P))[1]["providers"]]
    assert names == ["local", "my-cpu", "my-ec2"]
    assert (await api.get(f"{P}/my-cpu"))[1] == row
    assert await api.delete(f"{P}/my-cpu") == (200, row)
    assert (await api.get(f"{P}/my-cpu"))[0] == 404
    assert (await api.delete(f"{P}/my-cpu"))[0] == 404


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"name": "local", "kind": "local"}, "already_exists"),
        ({"name": "Bad_Name", "kind": "local"}, "invalid_name"),
        ({"name": "x", "kind": "cloud"}, "invalid"),
        ({"name": "x"}, "invalid"),
        ({"name": "x", "kind": "local", "region": "eu"}, "invalid"),
    ],
)
async def test_bad_providers_are_refused(api, body, code):
    status, answer = await api.post(P, body)
    assert (status, answer["error"]["code"]) == (409 if code == "already_exists" else 400, code)


async def test_a_provider_name_is_taken_once_per_namespace(api):
    assert (await api.post(P, {"name": "gpu", "kind": "external"}))[0] == 201
    status, body = await api.post(P, {"name": "gpu", "kind": "local"})
    assert (status, body["error"]["code"]) == (409, "already_exists")
    other = "/v1/namespaces/bob/providers"
    assert (await api.post(other, {"name": "gpu", "kind": "local"}))[0] == 201


async def test_the_built_in_local_provider_cannot_be_deleted(api):
    status, body = await api.delete(f"{P}/local")
    assert (status, body["error"]["code"]) == (409, "conflict")
    assert "built in" in body["error"]["message"]


async def test_provider_routes_create_an_unknown_namespace_in_the_callers_org(api, control_plane):
    # A write creates it (a read never does: tests/http/test_reads_create_nothing.py).
    created = await api.post("/v1/namespaces/fresh/providers", {"name": "ext", "kind": "external"})
    assert created[0] == 201 and created[1]["namespace"] == "fresh"
    status, body = await api.get("/v1/namespaces/fresh/providers")
    assert status == 200 and body["providers"][0]["namespace"] == "fresh"
    assert (await api.get("/v1/namespaces/fresh"))[1]["org"] == "default"

    assert (await api.post("/v1/namespaces", {"name": "bob", "org": "acme"}))[0] == 201
    _, token = await api.post("/v1/namespaces/bob/tokens", {})
    async with control_plane.client(token["token"]) as bob:
        status, row = await bob.post(
            "/v1/namespaces/newbie/providers", {"name": "mine", "kind": "external"}
        )
        assert status == 201 and row["namespace"] == "newbie"
        assert (await bob.get("/v1/namespaces/newbie"))[1]["org"] == "acme"
        # Another org's namespace is still refused, not taken over.
        assert (await bob.get("/v1/namespaces/fresh/providers"))[0] == 403


async def test_queue_routes_still_answer_404_for_an_unknown_namespace(api):
    assert (await api.get("/v1/namespaces/nowhere/queues"))[0] == 404
    assert (await api.get("/v1/namespaces/nowhere"))[0] == 404


async def test_a_providers_config_and_labels_are_replaced_by_patch_and_kept(
    plane_factory,
):
    handle = await plane_factory()
    async with handle.client() as api:
        body = {"name": "cpu", "kind": "local", "config": {"a": "1"}, "labels": {"team": "ml"}}
        status, row = await api.post(P, body)
        assert (status, row["labels"]) == (201, {"team": "ml"})
        status, row = await api.patch(f"{P}/cpu", {"config": {"b": [1, 2]}})
        assert status == 200, row
        assert (row["config"], row["labels"]) == ({"b": [1, 2]}, {"team": "ml"})
        status, row = await api.patch(f"{P}/cpu", {"labels": {}})
        assert (status, row["config"], row["labels"]) == (200, {"b": [1, 2]}, {})
    await handle.stop()
    again = await plane_factory(data_dir=handle.data_dir)
    async with again.client() as api:
        assert (await api.get(f"{P}/cpu"))[1] == row


@pytest.mark.parametrize(
    ("name", "body", "status", "code"),
    [
        ("cpu", {"kind": "external"}, 400, "immutable_field"),
        ("cpu", {"name": "gpu"}, 400, "immutable_field"),
        ("cpu", {"colour": "red"}, 400, "invalid"),
        ("cpu", {"labels": {"": "x"}}, 400, "invalid"),
        ("local", {"config": {}}, 409, "conflict"),
        ("nobody", {"config": {}}, 404, "not_found"),
    ],
)
async def test_bad_provider_patches_are_refused_and_change_nothing(api, name, body, status, code):
    assert (await api.post(P, {"name": "cpu", "kind": "local", "config": {"a": "1"}}))[0] == 201
    before = (await api.get(f"{P}/cpu"))[1]
    answer = await api.patch(f"{P}/{name}", body)
    assert (answer[0], answer[1]["error"]["code"]) == (status, code), answer
    assert (await api.get(f"{P}/cpu"))[1] == before


@pytest.mark.parametrize("kind", ["ssh", "slurm"])
async def test_only_an_admin_token_adds_or_changes_a_provider_that_reaches_other_machines(
    control_plane, api, kind
):
    config = {"hosts": ["gpu1"]} if kind == "ssh" else {"partition": "gpu"}
    status, made = await api.post("/v1/namespaces/default/tokens", {"description": "team"})
    assert status == 201, made
    async with control_plane.client(made["token"]) as tenant:
        status, answer = await tenant.post(P, {"name": "gpu", "kind": kind, "config": config})
        assert (status, answer["error"]["code"]) == (403, "forbidden")
        assert "admin token" in answer["error"]["message"]
        assert (await tenant.get(f"{P}/gpu"))[0] == 404
        assert (await api.post(P, {"name": "gpu", "kind": kind, "config": config}))[0] == 201
        status, answer = await tenant.patch(f"{P}/gpu", {"labels": {"a": "b"}})
        assert (status, answer["error"]["code"]) == (403, "forbidden")
        assert (await tenant.post(P, {"name": "cpu", "kind": "local"}))[0] == 201
