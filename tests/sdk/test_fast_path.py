"""The SDK's fast path: submits and result waits over NATS to the control plane's gateway,
HTTP when NATS cannot be reached or refuses, the same answers and errors either way."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support import daemon_process

from lakeshore import errors
from lakeshore.model import BusAccess, InvocationSubmit, Job, Result
from lakeshore.sdk import Client
from lakeshore.sdk import fastpath as fastpath_module
from lakeshore.sdk.call import Call
from lakeshore.sdk.fastpath import ENV_SWITCH

Q = "/v1/namespaces/default/queues"
QUEUE = "fast"
NOOP = InvocationSubmit(command=["true"])


class HttpLog(Client):
    """A real client that keeps the method and path of every HTTP request it sends."""

    def __init__(self, *args: Any, bus_url: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.http: list[tuple[str, str]] = []
        self._bus_url = bus_url

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.http.append((method, path))
        return await super().request(method, path, **kw)

    def bus_access(self) -> Call[BusAccess]:
        if self._bus_url is None:
            return super().bus_access()
        client, url = self, self._bus_url

        class Unreachable(Call[BusAccess]):
            async def body(self) -> Any:
                await client.request("GET", "/v1/bus")
                return {"nats_url": url}

        return Unreachable(self, BusAccess, "GET", "/v1/bus")

    def posts(self) -> list[str]:
        return [path for method, path in self.http if method == "POST"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def queue(api) -> str:
    status, body = await api.post(Q, {"name": QUEUE})
    assert status == 201, body
    return QUEUE


@pytest.fixture
async def client(control_plane, queue) -> AsyncIterator[HttpLog]:
    async with HttpLog(control_plane.api, control_plane.admin_token) as c:
        yield c


async def test_submits_travel_over_nats_after_one_http_question(client: HttpLog, js) -> None:
    first = await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)
    second = await client.fast.submit(QUEUE, [NOOP, NOOP], wait_s=None, namespace=None)
    assert client.http == [("GET", "/v1/bus")]
    assert (first.queue, first.namespace, len(first.ids), len(second.ids)) == (
        QUEUE,
        "default",
        1,
        2,
    )
    info = await js.stream_info(f"LS_default_{QUEUE}")
    assert info.state.messages == 3
    jobs = await client.jobs_ls(queue=QUEUE)
    assert {j.id for j in jobs} == {*first.ids, *second.ids}


async def test_the_servers_refusals_are_the_same_errors_as_over_http(client: HttpLog, api) -> None:
    with pytest.raises(errors.QueueNotFound, match="'nope' does not exist"):
        await client.fast.submit("nope", [NOOP], wait_s=None, namespace=None)
    await api.post(f"{Q}/{QUEUE}/drain")
    with pytest.raises(errors.WrongState, match="draining"):
        await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)
    with pytest.raises(errors.NotFound, match="no job 'j-nope'"):
        await client.fast.result("j-nope", 0, namespace=None)
    assert client.posts() == []


async def test_a_result_wait_is_answered_over_nats_when_the_run_ends(
    control_plane, client: HttpLog, tmp_path: Path
) -> None:
    answer = await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)
    [job_id] = answer.ids
    unfinished = await client.fast.result(job_id, 0, namespace=None)
    assert isinstance(unfinished, Job) and unfinished.state == "pending"
    waiting = asyncio.create_task(client.fast.result(job_id, 60, namespace=None))
    log = tmp_path / "daemon.log"
    async with daemon_process(control_plane, QUEUE, "fast-daemon", tmp_path, log):
        result = await asyncio.wait_for(waiting, 60)
    assert isinstance(result, Result) and (result.id, result.ok, result.exit_code) == (
        job_id,
        True,
        0,
    )
    assert [p for m, p in client.http if "result" in p] == []
    # Told the moment the outcome was accepted, and the history already shows it.
    assert (await client.job_show(job_id)).state == "succeeded"


async def test_http_serves_when_nats_cannot_be_reached(control_plane, queue) -> None:
    url = f"nats://127.0.0.1:{_closed_port()}"
    async with HttpLog(control_plane.api, control_plane.admin_token, bus_url=url) as client:
        first = await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)
        await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)
        result = await client.fast.result(first.ids[0], 0, namespace=None)
    assert isinstance(result, Job)
    # NATS was tried once; then HTTP only, for the next RETRY_S.
    assert [p for m, p in client.http if p == "/v1/bus"] == ["/v1/bus"]
    assert client.posts() == [f"{Q}/{QUEUE}/invocations"] * 2
    assert fastpath_module.RETRY_S >= 60


async def test_the_environment_turns_the_fast_path_off(
    control_plane, queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SWITCH, "0")
    async with HttpLog(control_plane.api, control_plane.admin_token) as client:
        await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)
    assert client.http == [("POST", f"{Q}/{QUEUE}/invocations")]


async def test_a_request_larger_than_nats_takes_goes_over_http(client: HttpLog) -> None:
    await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)  # connected
    big = [InvocationSubmit(command=["echo", "x" * 10_000]) for _ in range(150)]
    answer = await client.fast.submit(QUEUE, big, wait_s=None, namespace=None)
    assert len(answer.ids) == 150
    assert client.posts() == [f"{Q}/{QUEUE}/invocations"]


async def test_a_bad_token_is_refused_as_over_http(control_plane, queue) -> None:
    async with HttpLog(control_plane.api, "not-a-token") as client:
        with pytest.raises(errors.Unauthorized):
            await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)


async def test_a_namespace_created_after_connecting_is_reached_with_a_new_grant(
    control_plane, api
) -> None:
    await api.post("/v1/namespaces", {"name": "alice", "org": "acme"})
    token = (await api.post("/v1/namespaces/alice/tokens", {}))[1]["token"]
    await api.post("/v1/namespaces/alice/queues", {"name": QUEUE})
    async with HttpLog(control_plane.api, token) as client:
        await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace="alice")
        await api.post("/v1/namespaces", {"name": "bob", "org": "acme"})
        await api.post("/v1/namespaces/bob/queues", {"name": QUEUE})
        # Not in the connection's grant: refused by NATS, sent over HTTP, grant renewed.
        await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace="bob")
        await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace="bob")
        assert len(await client.jobs_ls(namespace="bob")) == 2
    assert client.posts() == ["/v1/namespaces/bob/queues/fast/invocations"]
    assert [p for m, p in client.http if p == "/v1/bus"] == ["/v1/bus"] * 2
