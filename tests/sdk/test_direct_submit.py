"""The SDK's direct submit (the server's ``direct_submit``, experimental): a plain submit is
published straight into its queue's stream on the producer's connection — no request to
the control plane — prepared as the plane prepares it, recorded by the plane from the
stream, run by a daemon; refusals read as the HTTP API's; keyed and blocking submits go
to the gateway as before. A real control plane, NATS, and daemon process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from polling import eventually
from support import daemon_process
from test_fast_path import HttpLog

from lakeshore import errors
from lakeshore.bus.denials import Denied
from lakeshore.model import InvocationSubmit, Result
from lakeshore.sdk import Client

Q = "/v1/namespaces/default/queues"
QUEUE = "direct"
NOOP = InvocationSubmit(command=["true"])
WAIT_S = 10.0


@pytest.fixture
async def plane(plane_factory):
    return await plane_factory(direct_submit=True)


@pytest.fixture
async def client(plane) -> AsyncIterator[HttpLog]:
    async with plane.client() as api:
        assert (await api.post(Q, {"name": QUEUE, "max_depth": 3}))[0] == 201
    async with HttpLog(plane.api, plane.admin_token) as c:
        yield c


async def test_a_plain_submit_is_stored_by_the_producer_and_recorded_by_the_plane(
    client: HttpLog, js
) -> None:
    answer = await client.fast.submit(QUEUE, [NOOP, NOOP], wait_s=None, namespace=None)
    assert (answer.queue, answer.namespace, len(answer.ids)) == (QUEUE, "default", 2)
    # No submit reached the plane: one read of where NATS is, one of the queue's row.
    assert client.http == [("GET", "/v1/bus"), ("GET", f"{Q}/{QUEUE}")]
    stored = await js.stream_info(f"LS_default_{QUEUE}")
    assert stored.state.messages == 2
    jobs = await eventually(
        client.jobs_ls, until=lambda js: sorted(j.id for j in js) == sorted(answer.ids),
        timeout_s=WAIT_S, what="the stored submits recorded from the producer's note",
    )  # fmt: skip
    assert {j.state for j in jobs} == {"pending"}
    shown = await client.job_show(answer.ids[0])
    assert shown.command == ["true"] and shown.queue == QUEUE


async def test_a_direct_submit_runs_and_its_result_comes_back(
    plane, client: HttpLog, tmp_path: Path
) -> None:
    answer = await client.fast.submit(QUEUE, [NOOP], wait_s=None, namespace=None)
    [job_id] = answer.ids
    waiting = asyncio.create_task(client.fast.result(job_id, 60, namespace=None))
    async with daemon_process(plane, QUEUE, "direct-daemon", tmp_path, tmp_path / "d.log"):
        result = await asyncio.wait_for(waiting, 60)
    assert isinstance(result, Result) and (result.id, result.ok) == (job_id, True)
    done = await client.job_show(job_id)
    assert done.state == "succeeded" and len(done.attempts) == 1


async def test_refusals_read_as_the_http_apis(plane, client: HttpLog) -> None:
    await client.fast.submit(QUEUE, [NOOP, NOOP], wait_s=None, namespace=None)
    with pytest.raises(errors.QueueFull, match="max_depth 3 reached.*first 1 of 2 were admitted"):
        await client.fast.submit(QUEUE, [NOOP, NOOP], wait_s=None, namespace=None)
    with pytest.raises(errors.Invalid, match="needs exactly one of fn"):
        await client.fast.submit(QUEUE, [InvocationSubmit()], wait_s=None, namespace=None)
    with pytest.raises(errors.QueueNotFound):
        await client.fast.submit("nowhere", [NOOP], wait_s=None, namespace=None)
    async with plane.client() as api:
        await api.post(Q + "/other")
        assert (await api.post(Q, {"name": "other"}))[0] == 201
        await client.fast.submit("other", [NOOP], wait_s=None, namespace=None)  # row read
        await api.post(Q + "/other/drain")
    # The row it read says active; the stream took nothing: read again, it says why.
    with pytest.raises(errors.WrongState, match="draining"):
        await client.fast.submit("other", [NOOP], wait_s=None, namespace=None)
    with pytest.raises(errors.WrongState, match="draining"):
        await client.fast.submit("other", [NOOP], wait_s=None, namespace=None)


async def test_keyed_and_blocking_submits_go_to_the_gateway(plane, client: HttpLog) -> None:
    keyed = InvocationSubmit(command=["true"], idempotency_key="k-1")
    first = await client.fast.submit(QUEUE, [keyed], wait_s=None, namespace=None)
    again = await client.fast.submit(QUEUE, [keyed], wait_s=None, namespace=None)
    assert again.ids == first.ids and again.duplicates == first.ids
    assert client.http == [("GET", "/v1/bus")]  # the gateway over NATS: no row read


async def test_a_server_without_direct_submit_grants_no_queue_subject(plane_factory, js) -> None:
    plain = await plane_factory()
    async with plain.client() as api:
        assert (await api.post(Q, {"name": "plain"}))[0] == 201
    async with Client(plain.api, plain.admin_token) as client:
        await client.fast.submit("plain", [NOOP], wait_s=None, namespace=None)
        bus = client.fast._bus
        assert bus is not None and client.fast._direct is None
        with pytest.raises(Denied):
            await bus.publish_work("ls.default.q.plain.p0", b"{}", "forged", 2.0)
    assert (await js.stream_info("LS_default_plain")).state.messages == 1
