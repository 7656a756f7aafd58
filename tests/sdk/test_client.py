"""The SDK client against the real control plane on a real port (and, for answers the
control plane never gives, a real aiohttp server on port 0)."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from lakeshore import errors
from lakeshore.model import (
    DEFAULT_QUEUE_DESCRIPTION,
    DaemonLaunch,
    Namespace,
    Queue,
    QueueCreate,
    QueueDetail,
    QueueEvent,
    QueueKind,
    QueueState,
    QueueStats,
    TokenCreated,
    Worker,
    WorkerEdited,
)
from lakeshore.sdk import Client
from lakeshore.sdk import queues as sdk_queues


@pytest.fixture
async def client(control_plane) -> AsyncIterator[Client]:
    async with Client(control_plane.api, control_plane.admin_token) as c:
        yield c


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_healthz_answers_without_a_token(control_plane):
    async with Client(control_plane.api, None) as anonymous:
        assert (await anonymous.healthz())["status"] == "ok"


async def test_queue_lifecycle_returns_model_structs(client):
    created = await client.queue_add(
        QueueCreate(name="training-h100", kind=QueueKind.PRIORITY, max_depth=10)
    )
    assert isinstance(created, Queue)
    assert (created.name, created.kind, created.max_depth) == ("training-h100", "priority", 10)

    shown = await client.queue_show("training-h100")
    assert isinstance(shown, QueueDetail) and shown.members == []

    patched = await client.queue_patch("training-h100", {"max_depth": None, "description": "x"})
    assert (patched.max_depth, patched.description) == (None, "x")

    assert (await client.queue_drain("training-h100")).state is QueueState.DRAINING
    assert (await client.queue_archive("training-h100")).state is QueueState.ARCHIVED
    assert [q.name for q in await client.queues_ls(state="archived")] == ["training-h100"]
    assert (await client.queue_unarchive("training-h100")).state is QueueState.ACTIVE

    stats = await client.queue_stats("training-h100")
    assert isinstance(stats, QueueStats) and stats.daemon_count == 0 and stats.pending == 0

    events = await client.queue_events("training-h100", verbose=True, limit=2)
    assert len(events) == 2 and all(isinstance(e, QueueEvent) for e in events)
    assert events[0].ts >= events[1].ts and events[0].detail is not None

    assert await client.queue_rm("training-h100") == {
        "deleted": "training-h100",
        "namespace": "default",
        "scrubbed": [],
    }
    names = [q.name for q in await client.queues_ls()]
    assert names == ["default"]


async def test_default_queue_is_there_without_creating_it(client):
    row = await client.queue_show("default")
    assert (row.kind, row.description) == ("fifo", DEFAULT_QUEUE_DESCRIPTION)


async def test_body_is_the_json_the_server_sent(client):
    await client.queue_add(QueueCreate(name="cpu-prep"))
    call = client.queue_show("cpu-prep")
    body = await call.body()
    assert body == await client.request("GET", "/v1/namespaces/default/queues/cpu-prep")
    assert isinstance(body["created_at"], str)
    assert call.decode(body) == await client.queue_show("cpu-prep")


async def test_error_answers_raise_the_class_the_server_named(client):
    with pytest.raises(errors.QueueNotFound, match="queue 'nope' does not exist"):
        await client.queue_show("nope")
    with pytest.raises(errors.ReservedName):
        await client.queue_archive("default")
    with pytest.raises(errors.ImmutableField):
        await client.queue_patch("default", {"kind": "priority"})
    with pytest.raises(errors.WorkerNotFound):
        await client.worker_show("ghost")
    with pytest.raises(errors.NamespaceNotFound):
        await client.queues_ls(namespace="nowhere")


async def test_a_name_with_a_slash_stays_one_path_segment(client):
    with pytest.raises(errors.InvalidName, match="'a/b'"):
        await client.queue_show("a/b")


async def test_namespace_argument_overrides_the_clients(client):
    ns = await client.namespaces_add("bob", org="acme")
    assert isinstance(ns, Namespace) and (ns.name, ns.org) == ("bob", "acme")
    await client.queue_add(QueueCreate(name="inference"), namespace="bob")
    assert (await client.queue_show("inference", namespace="bob")).namespace == "bob"
    with pytest.raises(errors.QueueNotFound):
        await client.queue_show("inference")
    assert "bob" in [n.name for n in await client.namespaces_ls()]
    assert (await client.namespaces_show("bob")).org == "acme"


async def test_tokens_authorise_until_revoked(client, control_plane):
    await client.namespaces_add("bob", org="acme")
    created = await client.tokens_create("ci", namespace="bob")
    assert isinstance(created, TokenCreated) and created.namespace == "bob"
    async with Client(control_plane.api, created.token, namespace="bob") as bob:
        assert [q.name for q in await bob.queues_ls()] == ["default"]
        assert [t.id for t in await client.tokens_ls(namespace="bob")] == [created.id]
        await client.tokens_revoke(created.id, namespace="bob")
        with pytest.raises(errors.Unauthorized):
            await bob.queues_ls()


async def test_queues_ls_reads_every_page(client, monkeypatch):
    monkeypatch.setattr(sdk_queues, "LS_PAGE", 2)
    for name in ["c", "a", "e", "b", "d"]:
        await client.queue_add(QueueCreate(name=name))
    asked: list[dict] = []
    request = client.request

    async def spy(method, path, **kw):
        asked.append(kw.get("params") or {})
        return await request(method, path, **kw)

    monkeypatch.setattr(client, "request", spy)
    listed = await client.queues_ls()
    assert [q.name for q in listed] == ["a", "b", "c", "d", "default", "e"]
    # A full last page has a next; the empty page after it ends the list.
    assert [p.get("after") for p in asked] == [None, "default/b", "default/d", "default/e"]
    assert all(p["limit"] == 2 for p in asked)
    body = await client.queues_ls(state="active").body()
    assert set(body) == {"queues"} and len(body["queues"]) == 6
    page = await client.queues_page(limit=4)
    assert ([q.name for q in page.queues], page.next) == (["a", "b", "c", "d"], "default/d")
    last = await client.queues_page(limit=4, after=page.next)
    assert ([q.name for q in last.queues], last.next) == (["default", "e"], None)


async def test_the_sdk_has_a_method_for_every_route_the_api_serves(client):
    c = Client("http://unused", None, namespace="x")
    calls = [
        c.healthz(),
        c.readyz(),
        c.openapi(),
        c.namespaces_add("x"),
        c.namespaces_ls(),
        c.namespaces_show("x"),
        c.tokens_create(),
        c.tokens_ls(),
        c.tokens_revoke("x"),
        c.queues_ls(),
        c.queue_add(QueueCreate(name="x")),
        c.queue_show("x"),
        c.queue_patch("x", {}),
        c.queue_drain("x"),
        c.queue_archive("x"),
        c.queue_unarchive("x"),
        c.queue_rm("x"),
        c.queue_events("x"),
        c.queue_stats("x"),
        c.workers_ls(),
        c.worker_show("x"),
        c.worker_queues("x"),
        c.worker_patch("x", labels={}),
        c.submit("x", []),
        c.worker_retire("x"),
        c.daemons_launch(DaemonLaunch(name="x")),
        c.daemons_join(),
        c.bus_access(),
        c.providers_add("x", "local"),
        c.providers_ls(),
        c.providers_show("x"),
        c.providers_patch("x", labels={}),
        c.providers_rm("x"),
        c.jobs_ls(),
        c.job_show("x"),
        c.job_result("x"),
        c.job_cancel("x"),
        c.job_retry("x"),
        c.controller_status(),
        c.queue_history("x"),
        c.code_info("x"),
        c.code_ls(),
    ]
    # Routes whose answer is not JSON: a file the SDK saves (``history_export``, no Call),
    # and the Prometheus text a scraper reads.
    files = {("GET", "/v1/namespaces/x/history.parquet"), ("GET", "/metrics")}
    files.add(("POST", "/v1/backup"))
    # A streamed NDJSON answer, read line by line (``stream_logs``, ``Invocation.logs``).
    files.add(("GET", "/v1/namespaces/x/jobs/x/logs"))
    # A body that is not JSON: a code snapshot's tar (``upload_code``).
    files.add(("PUT", "/v1/namespaces/x/code/x"))
    paths = (await client.openapi())["paths"]
    served = {
        (verb.upper(), re.sub(r"\{[^}/]+\}", "x", path))
        for path, item in paths.items()
        for verb in item
        if verb in ("get", "post", "put", "patch", "delete")
    }
    assert {(call.method, call.path) for call in calls} | files == served


async def test_a_membership_edit_answers_the_row_and_its_warnings(client, register):
    worker = await register("w")
    edited = await client.worker_queues("w", add=["later"])
    assert isinstance(edited, WorkerEdited) and isinstance(edited, Worker)
    assert (edited.id, edited.queues) == (worker.id, ["later"])
    assert [w.split(":")[0] for w in edited.warnings] == ["queue_not_found"]


async def test_workers_list_is_empty_without_daemons(client):
    assert await client.workers_ls() == []


async def test_a_refused_connection_names_the_api_and_the_fix():
    api = f"http://127.0.0.1:{_closed_port()}"
    async with Client(api, None) as c:
        with pytest.raises(errors.Unavailable) as caught:
            await c.healthz()
    assert api in caught.value.message and "lakeshore server" in caught.value.message


async def test_a_non_http_api_url_is_invalid():
    async with Client("ftp://example.invalid", None) as c:
        with pytest.raises(errors.Invalid, match="invalid api url"):
            await c.healthz()


@pytest.fixture
async def odd_server() -> AsyncIterator[str]:
    """Answers the control plane never gives: unknown codes, HTML, bad 200s."""

    async def unknown_code(request: web.Request) -> web.Response:
        status = int(request.match_info["status"])
        return web.json_response({"error": {"code": "brand_new", "message": "m"}}, status=status)

    async def html(request: web.Request) -> web.Response:
        return web.Response(status=502, text="<html><body>Bad   gateway</body></html>")

    async def bad_json(request: web.Request) -> web.Response:
        return web.Response(status=200, text="{not json")

    async def not_an_object(request: web.Request) -> web.Response:
        return web.json_response(["not", "an", "object"])

    app = web.Application()
    app.router.add_get("/v1/code/{status}", unknown_code)
    app.router.add_get("/v1/html", html)
    app.router.add_get("/v1/bad", bad_json)
    app.router.add_get("/v1/healthz", not_an_object)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_an_unknown_code_maps_by_http_status(odd_server):
    async with Client(odd_server, None) as c:
        with pytest.raises(errors.Conflict, match="^m$") as caught:
            await c.request("GET", "/v1/code/409")
        assert type(caught.value) is errors.Conflict
        with pytest.raises(errors.LakeshoreError) as caught:
            await c.request("GET", "/v1/code/418")
        assert type(caught.value) is errors.LakeshoreError


async def test_an_unparseable_error_keeps_the_status_and_an_excerpt(odd_server):
    async with Client(odd_server, None) as c:
        with pytest.raises(errors.LakeshoreError) as caught:
            await c.request("GET", "/v1/html")
        assert type(caught.value) is errors.LakeshoreError
        assert "http 502" in caught.value.message
        assert "<html><body>Bad gateway</body></html>" in caught.value.message
        with pytest.raises(errors.LakeshoreError, match="http 200"):
            await c.request("GET", "/v1/bad")


async def test_an_answer_of_the_wrong_shape_is_an_error_not_a_crash(odd_server):
    async with Client(odd_server, None) as c:
        with pytest.raises(errors.LakeshoreError, match="unexpected answer to GET /v1/healthz"):
            await c.healthz()
