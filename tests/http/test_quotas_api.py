"""Quotas per org through the API of a real control plane started with tight ``[quotas]``:
over a quota is a 429 naming the quota and its value, and changes nothing; below it, the
same request works; ``GET /v1/namespaces/:ns`` shows every quota and its usage."""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from polling import eventually
from support import Api, PlaneHandle

from lakeshore.actors.launcher import StopDaemon
from lakeshore.actors.workers import Beat, Register
from lakeshore.cli import output
from lakeshore.errors import QuotaExceeded
from lakeshore.model import (
    Heartbeat,
    NamespaceDetail,
    ProviderKind,
    Worker,
    WorkerRegister,
    WorkerStatus,
    now,
)
from lakeshore.quotas import Quotas
from lakeshore.sdk import Client

LIMITS = Quotas(
    queues_per_namespace=2,
    daemons_per_org=2,
    local_daemons_per_host=1,
    pending_per_org=3,
    elasticity_max=4,
)
#: namespace -> org: alpha and beta are org acme's, gamma org globex's
ORGS = {"alpha": "acme", "beta": "acme", "gamma": "globex"}
#: Stands in for ``lakeshore daemon run`` (it takes the flags and waits for SIGTERM): the
#: local quota counts processes, which must not end on their own during the test.
STAND_IN = (sys.executable, "-c", "import time; time.sleep(600)")
WAIT_S = 20.0


@pytest.fixture
async def tight(plane_factory) -> PlaneHandle:
    handle = await plane_factory(quotas=LIMITS)
    async with handle.client() as admin:
        for name, org in ORGS.items():
            assert (await admin.post("/v1/namespaces", {"name": name, "org": org}))[0] == 201
    return handle


@pytest.fixture
async def http(tight: PlaneHandle) -> AsyncIterator[Api]:
    async with tight.client() as client:
        yield client


def q(ns: str, rest: str = "") -> str:
    return f"/v1/namespaces/{ns}/queues{rest}"


def refused(answer: tuple[int, Any], quota: str, limit: int) -> str:
    """Assert a 429 naming ``quota`` and ``limit``; the message."""
    status, body = answer
    assert status == 429, body
    assert body["error"]["code"] == "quota_exceeded"
    message = body["error"]["message"]
    assert f"over quota {quota} ({limit})" in message and "[quotas]" in message
    return message


async def names(http: Api, ns: str) -> list[str]:
    _, body = await http.get(q(ns))
    return sorted(row["name"] for row in body["queues"] if row["namespace"] == ns)


async def register(tight: PlaneHandle, ns: str, name: str) -> Worker:
    """Register a worker with its owner, as the gateway does for a daemon."""
    return await tight.plane.parts.workers.ask(Register(WorkerRegister(namespace=ns, name=name)))


async def test_queues_per_namespace(http: Api) -> None:
    for name in ("a", "b"):
        assert (await http.post(q("alpha"), {"name": name}))[0] == 201
    message = refused(await http.post(q("alpha"), {"name": "c"}), "queues_per_namespace", 2)
    assert "namespace 'alpha' has 2 queue(s) besides default" in message
    assert await names(http, "alpha") == ["a", "b", "default"]
    assert (await http.get(q("alpha", "/c")))[0] == 404
    assert (await http.post(q("beta"), {"name": "c"}))[0] == 201  # per namespace
    assert (await http.delete(q("alpha", "/a")))[0] == 200
    assert (await http.post(q("alpha"), {"name": "c"}))[0] == 201


async def test_elasticity_max_on_create_and_patch(http: Api) -> None:
    big = {"name": "e", "elasticity": {"kind": "elastic", "max": 5}}
    message = refused(await http.post(q("alpha"), big), "elasticity_max", 4)
    assert "elasticity max 5 is above it" in message
    assert (await http.get(q("alpha", "/e")))[0] == 404
    ok = {"name": "e", "elasticity": {"kind": "elastic", "max": 4}}
    assert (await http.post(q("alpha"), ok))[0] == 201
    _, before = await http.get(q("alpha", "/e"))
    patch = {"description": "wider", "elasticity": {"max": 5}}
    refused(await http.patch(q("alpha", "/e"), patch), "elasticity_max", 4)
    assert (await http.get(q("alpha", "/e")))[1] == before
    _, events = await http.get(q("alpha", "/e/events"))
    assert [e["type"] for e in events["events"]] == ["created"]
    status, after = await http.patch(q("alpha", "/e"), {"elasticity": {"max": 3}})
    assert status == 200 and after["elasticity"]["max"] == 3


async def test_pending_per_org(http: Api) -> None:
    def submit(ns: str, n: int) -> Any:
        batch = {"invocations": [{"fn": "jobs:work", "args": [i]} for i in range(n)]}
        return http.post(q(ns, "/default/invocations"), batch)

    status, first = await submit("alpha", 2)
    assert status == 202, first
    assert (await submit("beta", 1))[0] == 202
    message = refused(await submit("alpha", 1), "pending_per_org", 3)
    assert "org 'acme' has 3 invocation(s) pending across its queues" in message
    for ns, pending in (("alpha", 2), ("beta", 1)):
        _, stats = await http.get(q(ns, "/default/stats"))
        assert stats["pending"] == pending
    assert (await submit("gamma", 3))[0] == 202  # another org
    job = first["ids"][0]
    assert (await http.post(f"/v1/namespaces/alpha/jobs/{job}/cancel"))[0] // 100 == 2
    status, _ = await eventually(
        lambda: submit("beta", 1),
        timeout_s=WAIT_S,
        until=lambda answer: answer[0] != 429,
        what="room once a pending invocation was cancelled",
    )
    assert status == 202


async def test_daemons_per_org(tight: PlaneHandle, http: Api) -> None:
    d1 = await register(tight, "alpha", "d1")
    await register(tight, "beta", "d2")
    launch = {"name": "extra", "provider": "local"}
    message = refused(await http.post("/v1/namespaces/alpha/daemons", launch), "daemons_per_org", 2)
    assert "org 'acme' has 2 daemon(s) starting or running" in message
    assert (await http.get("/v1/namespaces/alpha/workers/extra"))[0] == 404
    with pytest.raises(QuotaExceeded, match=r"over quota daemons_per_org \(2\)"):
        await register(tight, "beta", "d3")
    assert (await http.get("/v1/namespaces/beta/workers/d3"))[0] == 404
    await register(tight, "gamma", "d3")  # another org
    ended = Heartbeat(worker_id=d1.id, namespace="alpha", status=WorkerStatus.STOPPED, ts=now())
    await tight.plane.parts.workers.ask(Beat(ended))
    await register(tight, "beta", "d3")


async def test_local_daemons_per_host(tight: PlaneHandle, http: Api) -> None:
    tight.plane.parts.providers[ProviderKind.LOCAL].command = STAND_IN
    status, body = await http.post("/v1/namespaces/alpha/daemons", {"name": "one"})
    assert status == 202, body
    answer = await http.post("/v1/namespaces/beta/daemons", {"name": "two"})
    message = refused(answer, "local_daemons_per_host", 1)
    assert "org 'acme' runs 1 daemon(s) on the control plane's host" in message
    assert (await http.get("/v1/namespaces/beta/workers/two"))[0] == 404
    assert (await http.post("/v1/namespaces/gamma/daemons", {"name": "three"}))[0] == 202
    await tight.plane.parts.launcher.ask(StopDaemon("alpha", "one"))
    status, _ = await eventually(
        lambda: http.post("/v1/namespaces/beta/daemons", {"name": "two"}),
        timeout_s=WAIT_S,
        until=lambda answer: answer[0] != 429,
        what="room once the local daemon stopped",
    )
    assert status == 202


async def test_the_namespace_shows_each_quota_and_its_usage(tight: PlaneHandle, http: Api) -> None:
    assert (await http.post(q("alpha"), {"name": "a"}))[0] == 201
    await register(tight, "beta", "d1")
    assert (await http.post(q("alpha", "/a/invocations"), {"fn": "jobs:work"}))[0] == 202

    async def shown() -> dict[str, Any]:
        status, body = await http.get("/v1/namespaces/alpha")
        assert status == 200, body
        return body

    body = await eventually(
        shown, timeout_s=WAIT_S, until=lambda b: b["quotas"]["pending_per_org"]["used"] == 1
    )
    assert (body["name"], body["org"]) == ("alpha", "acme")
    assert body["quotas"] == {
        "queues_per_namespace": {"limit": 2, "used": 1},
        "daemons_per_org": {"limit": 2, "used": 1},
        "local_daemons_per_host": {"limit": 1, "used": 0},
        "pending_per_org": {"limit": 3, "used": 1},
        "elasticity_max": {"limit": 4, "used": None},
        "namespaces_per_org": {"limit": 1000, "used": 2},
        "result_waits_per_org": {"limit": 1000, "used": None},
        "result_waits_per_asker": {"limit": 500, "used": None},
    }
    async with Client(tight.api, tight.admin_secret) as client:
        detail = await client.namespaces_show("gamma")
    assert isinstance(detail, NamespaceDetail) and detail.quotas is not None
    assert detail.quotas.daemons_per_org.used == 0
    shown_table = output.namespace(detail)
    assert re.search(r"^QUOTA +LIMIT +USED$", shown_table, re.MULTILINE)
    assert re.search(r"^pending_per_org +3 +0$", shown_table, re.MULTILINE)


async def test_the_openapi_document_describes_the_quotas(http: Api) -> None:
    _, doc = await http.get("/v1/openapi.json")
    show = doc["paths"]["/v1/namespaces/{ns}"]["get"]["responses"]
    assert show["200"]["content"]["application/json"]["schema"]["$ref"].endswith("NamespaceDetail")
    assert "quota" in show["429"]["description"]
    assert "NamespaceQuotas" in doc["components"]["schemas"]
