"""The NATS front door: register, heartbeat (membership, retire, liveness), fast submit
and result waits."""

from __future__ import annotations

import asyncio

import msgspec
import pytest_asyncio
from natsauth import ask, asker_inbox, plane_nats
from polling import eventually

from lakeshore.actors.workers import new_worker_id
from lakeshore.bus import codec, subjects
from lakeshore.gateway import DAEMON, Route, _answering
from lakeshore.model import (
    ErrorBody,
    FastResult,
    FastSubmit,
    Heartbeat,
    HeartbeatReply,
    InvocationSubmit,
    Job,
    Result,
    SubmitAnswer,
    Worker,
    WorkerRegister,
    WorkerStatus,
    now,
)
from lakeshore.security.replies import SteeredReplies


@pytest_asyncio.fixture
async def nc(nats_server):
    conn = await plane_nats(nats_server.url)
    yield conn
    await conn.close()


async def _request(nc, subject: str, body, answer_type):
    reply = await ask(nc, subject, codec.encode(body), inbox=asker_inbox(subject, body))
    try:
        return codec.decode(reply.data, answer_type)
    except msgspec.ValidationError:
        return codec.decode(reply.data, ErrorBody)


async def _beat(nc, worker: Worker, status=WorkerStatus.IDLE) -> HeartbeatReply:
    hb = Heartbeat(worker_id=worker.id, namespace=worker.namespace, status=status, ts=now())
    subject = subjects.heartbeat_subject(worker.namespace, worker.id)
    return await _request(nc, subject, hb, HeartbeatReply)


async def _register(nc, reg: WorkerRegister) -> Worker | ErrorBody:
    assert reg.id is not None
    return await _request(nc, subjects.register_subject(reg.namespace, reg.id), reg, Worker)


def _reg(namespace: str, name: str, **fields) -> WorkerRegister:
    return WorkerRegister(namespace=namespace, name=name, id=new_worker_id(), **fields)


async def test_register_and_heartbeat_carry_membership(api, nc):
    await api.post("/v1/namespaces/default/queues", {"name": "eval"})
    reg = _reg("default", "daemon-b", queues=["eval"])
    worker = await _register(nc, reg)
    assert isinstance(worker, Worker) and worker.status == WorkerStatus.IDLE
    assert worker.id == reg.id
    assert (await _beat(nc, worker)).queues == ["eval"]
    await api.post(f"/v1/namespaces/default/workers/{worker.id}/queues", {"remove": ["eval"]})
    reply = await _beat(nc, worker, WorkerStatus.BUSY)
    assert reply.queues == [] and not reply.retire
    body = (await api.get("/v1/namespaces/default/workers/daemon-b"))[1]
    assert body["status"] == "busy"


async def test_register_in_an_unknown_namespace_is_refused(nc, control_plane):
    answer = await _register(nc, _reg("nowhere", "w"))
    assert isinstance(answer, ErrorBody) and answer.error.code == "namespace_not_found"


async def test_register_and_heartbeat_must_speak_for_their_subject(nc, control_plane):
    reg = _reg("default", "imposter")
    other = new_worker_id()
    subject = subjects.register_subject("default", other)
    answer = await _request(nc, subject, reg, Worker)
    assert isinstance(answer, ErrorBody) and answer.error.code == "forbidden"
    unnamed = WorkerRegister(namespace="default", name="imposter")
    answer = await _request(nc, subject, unnamed, Worker)
    assert isinstance(answer, ErrorBody) and answer.error.code == "forbidden"
    hb = Heartbeat(worker_id=reg.id, namespace="default", status=WorkerStatus.IDLE, ts=now())
    answer = await _request(nc, subjects.heartbeat_subject("default", other), hb, HeartbeatReply)
    assert isinstance(answer, ErrorBody) and answer.error.code == "forbidden"


async def test_an_unknown_worker_is_told_to_register(nc, control_plane):
    ghost = Worker(id="w-ghost", name="ghost", namespace="default", started_at=now())
    assert (await _beat(nc, ghost)).unknown


async def test_retire_is_in_the_heartbeat_reply(api, nc):
    worker = await _register(nc, _reg("default", "r"))
    status, body = await api.request("DELETE", "/v1/namespaces/default/workers/r")
    assert status == 202 and body["status"] == "retiring"
    reply = await _beat(nc, worker, WorkerStatus.BUSY)
    assert reply.retire
    await _beat(nc, worker, WorkerStatus.STOPPED)
    assert (await api.get("/v1/namespaces/default/workers/r"))[1]["status"] == "stopped"


async def test_a_silent_worker_is_marked_lost_and_comes_back(plane_factory, nc):
    handle = await plane_factory(lost_after_s=0.3, heartbeat_s=0.1)
    async with handle.client() as api:
        await api.get("/v1/namespaces/default/queues/default")
    worker = await _register(nc, _reg("default", "quiet"))
    async with handle.client() as api:
        await eventually(
            lambda: api.get("/v1/namespaces/default/workers/quiet"),
            until=lambda reply: reply[1]["status"] == "lost",
            timeout_s=10,
            every_s=0.05,
            what="worker quiet lost",
        )
        events = (await api.get("/v1/namespaces/default/queues/default/events"))[1]["events"]
        assert events[0]["type"] == "daemon_lost"
        await _beat(nc, worker)
        assert (await api.get("/v1/namespaces/default/workers/quiet"))[1]["status"] == "idle"


async def test_fast_submit_over_nats(api, nc, control_plane):
    await api.post("/v1/namespaces/default/queues", {"name": "q"})
    body = FastSubmit(
        token=control_plane.admin_token,
        invocations=[InvocationSubmit(fn="m:f"), InvocationSubmit(fn="m:g")],
    )
    subject = subjects.submit_subject("default", "q")
    answer = await _request(nc, subject, body, SubmitAnswer)
    assert isinstance(answer, SubmitAnswer) and len(answer.ids) == 2
    bad = FastSubmit(token="lsk_nope", invocations=[InvocationSubmit(fn="m:f")])
    answer = await _request(nc, subject, bad, SubmitAnswer)
    assert isinstance(answer, ErrorBody) and answer.error.code == "unauthorized"
    reply = await ask(nc, subject, b"{not json", inbox=subjects.PRODUCER_INBOXES + ".x")
    assert codec.decode(reply.data, ErrorBody).error.code == "invalid"


async def test_a_result_wait_is_held_and_answers_while_other_requests_go_on(api, nc, control_plane):
    await api.post("/v1/namespaces/default/queues", {"name": "q"})
    token = control_plane.admin_token
    body = FastSubmit(token=token, invocations=[InvocationSubmit(fn="m:f")])
    [job_id] = (await _request(nc, subjects.submit_subject("default", "q"), body, SubmitAnswer)).ids
    wait = codec.encode(FastResult(token=token, wait_s=30))
    subject = subjects.result_wait_subject("default", job_id)
    inbox = asker_inbox(subject, FastResult(token=token))
    held = asyncio.create_task(ask(nc, subject, wait, inbox=inbox, timeout=30))
    # Other requests are answered while the wait is held (one task per request).
    again = await _request(nc, subjects.submit_subject("default", "q"), body, SubmitAnswer)
    assert isinstance(again, SubmitAnswer) and not held.done()
    status, _ = await api.post(f"/v1/namespaces/default/jobs/{job_id}/cancel")
    assert status == 200
    result = codec.decode((await asyncio.wait_for(held, 10)).data, Result)
    assert (result.id, result.ok, result.error.type) == (job_id, False, "lakeshore.Cancelled")
    unknown = await _request(
        nc, subjects.result_wait_subject("default", "nope"), FastResult(token=token), Job
    )
    assert isinstance(unknown, ErrorBody) and unknown.error.code == "not_found"


async def test_an_answer_larger_than_nats_takes_is_refused_with_too_large():
    async def big(subject: str, body: object, reply: str) -> dict[str, str]:
        return {"value": "x" * 100}

    route = Route("big", "ls.*.hb.*", DAEMON, dict)
    answer = _answering(route, big, SteeredReplies(), max_payload=50)
    reply = subjects.daemon_inbox("default", "w") + ".1"
    error = codec.decode(await answer("ls.default.hb.w", b"{}", reply), ErrorBody).error
    assert error.code == "too_large" and "ask over HTTP" in error.message
