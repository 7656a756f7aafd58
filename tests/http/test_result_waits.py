"""One org cannot hold more result waits open than its quotas, over HTTP or NATS: past
``result_waits_per_asker`` (a token over HTTP, a NATS connection) or
``result_waits_per_org`` a wait is refused at once with 429; another org still waits; a
wait that ends gives its place back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from polling import eventually
from support import Api, PlaneHandle

from lakeshore.bus import codec
from lakeshore.bus.producer import ProducerBus
from lakeshore.model import ErrorBody, FastResult
from lakeshore.quotas import Quotas

LIMITS = Quotas(result_waits_per_org=3, result_waits_per_asker=2)
WAIT_S = 20.0


@pytest.fixture
async def plane(plane_factory) -> PlaneHandle:
    handle = await plane_factory(quotas=LIMITS)
    async with handle.client() as admin:
        for name, org in (("alpha", "acme"), ("gamma", "globex")):
            assert (await admin.post("/v1/namespaces", {"name": name, "org": org}))[0] == 201
            assert (await admin.post(f"/v1/namespaces/{name}/queues", {"name": "q"}))[0] == 201
    return handle


async def _token(admin: Api, ns: str) -> str:
    status, body = await admin.post(f"/v1/namespaces/{ns}/tokens", {})
    assert status == 201, body
    return body["token"]


async def _pending(admin: Api, ns: str) -> str:
    path = f"/v1/namespaces/{ns}/queues/q/invocations"
    status, body = await admin.post(path, {"invocations": [{"command": ["true"]}]})
    assert status == 202, body
    return body["ids"][0]


def _wait(api: Api, ns: str, job: str, token: str) -> asyncio.Task[tuple[int, Any]]:
    path = f"/v1/namespaces/{ns}/jobs/{job}/result?wait_s=30"
    return asyncio.create_task(api.request("GET", path, token=token))


async def _open(plane: PlaneHandle, org: str, count: int) -> None:
    jobs = plane.plane.parts.services.jobs
    await eventually(
        lambda: jobs.open_waits(org), until=lambda n: n == count, timeout_s=WAIT_S,
        what=f"{count} waits of {org} open",
    )  # fmt: skip


def _refused(answer: tuple[int, Any], quota: str, limit: int) -> None:
    status, body = answer
    assert status == 429, body
    assert body["error"]["code"] == "quota_exceeded"
    assert f"over quota {quota} ({limit})" in body["error"]["message"]


async def test_result_waits_are_bounded_per_token_and_per_org_over_http(plane) -> None:
    async with plane.client() as admin:
        first, second, other = (
            await _token(admin, "alpha"),
            await _token(admin, "alpha"),
            await _token(admin, "gamma"),
        )
        jobs = [await _pending(admin, "alpha") for _ in range(3)]
        held = [_wait(admin, "alpha", jobs[0], first), _wait(admin, "alpha", jobs[1], first)]
        await _open(plane, "acme", 2)
        _refused(await _wait(admin, "alpha", jobs[2], first), "result_waits_per_asker", 2)
        held.append(_wait(admin, "alpha", jobs[2], second))
        await _open(plane, "acme", 3)
        _refused(await _wait(admin, "alpha", jobs[2], second), "result_waits_per_org", 3)
        # A plain read is not a wait; another org's waits are its own.
        status, _ = await admin.request(
            "GET", f"/v1/namespaces/alpha/jobs/{jobs[2]}/result", token=second
        )
        assert status == 202
        theirs = _wait(admin, "gamma", await _pending(admin, "gamma"), other)
        await _open(plane, "globex", 1)
        # A wait that ends frees its place.
        status, _ = await admin.post(f"/v1/namespaces/alpha/jobs/{jobs[0]}/cancel")
        assert status == 200
        assert (await asyncio.wait_for(held[0], WAIT_S))[0] == 200
        await _open(plane, "acme", 2)
        held.append(_wait(admin, "alpha", await _pending(admin, "alpha"), second))
        await _open(plane, "acme", 3)
        for task in (*held[1:], theirs):
            task.cancel()
        await asyncio.gather(*held[1:], theirs, return_exceptions=True)


async def test_result_waits_are_bounded_per_nats_connection(plane) -> None:
    async with plane.client() as admin:
        token = await _token(admin, "alpha")
        jobs = [await _pending(admin, "alpha") for _ in range(3)]
        nats_url = (await admin.get("/v1/bus"))[1]["nats_url"]
    bus = await ProducerBus.connect(nats_url, token, None)
    try:
        ask = codec.encode(FastResult(token=token, wait_s=30))
        held = [asyncio.create_task(bus.result("alpha", job, ask, 40)) for job in jobs[:2]]
        await _open(plane, "acme", 2)
        answer = codec.decode(await bus.result("alpha", jobs[2], ask, 5), ErrorBody)
        assert answer.error.code == "quota_exceeded"
        assert "result_waits_per_asker" in answer.error.message
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
    finally:
        await bus.close()
