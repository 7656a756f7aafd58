"""``GET …/jobs/:id/logs`` against a real control plane, its log written straight into
``LS_LOGS`` as a daemon writes it (the daemons' side is tests/daemon/test_daemon_logs.py):
resuming after a sequence, tails, streams, a follow that ends with the job, bad
parameters and other orgs' tokens."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import msgspec
import pytest
from natsauth import plane_nats
from polling import eventually

from lakeshore.bus import subjects
from lakeshore.bus.logs import chunk_headers, end_headers
from lakeshore.config import ClientSettings
from lakeshore.model.logs import LogChunk, LogEnd
from lakeshore.sdk import Invocation, configure, sync

NS = "default"
J = f"/v1/namespaces/{NS}/jobs"
WAIT_S = 15.0


async def _lines(api: Any, job: str, token: str | None = None, **params: Any) -> list[dict]:
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
    headers = {"Authorization": f"Bearer {token or api.token}"}
    async with aiohttp.ClientSession() as http, asyncio.timeout(WAIT_S):
        async with http.get(f"{api.base}{J}/{job}/logs", params=query, headers=headers) as r:
            assert r.status == 200, await r.text()
            return [msgspec.json.decode(line) async for line in r.content if line.strip()]


@pytest.fixture
async def job(api) -> str:
    """A pending job (no daemon serves its queue)."""
    assert (await api.post(f"/v1/namespaces/{NS}/queues", {"name": "quiet"}))[0] == 201
    path = f"/v1/namespaces/{NS}/queues/quiet/invocations"
    status, body = await api.post(path, {"invocations": [{"command": ["true"]}]})
    assert status == 202, body
    return body["ids"][0]


async def _write(url: str, job: str, attempt: int, chunks: list[tuple[str, str]], end: bool):
    """Publish ``(stream, text)`` chunks of one attempt as its daemon would."""
    nc = await plane_nats(url)
    try:
        js = nc.jetstream()
        subject = subjects.log_subject(NS, job, attempt)
        for seq, (stream, text) in enumerate(chunks, 1):
            headers = chunk_headers(f"t{attempt}.{seq}", seq, stream, time.time())
            await js.publish(subject, text.encode(), headers=headers)
        if end:
            seq = len(chunks) + 1
            await js.publish(subject, b"", headers=end_headers(f"t{attempt}.{seq}", seq, 0.0))
    finally:
        await nc.close()


def _text(lines: list[dict]) -> str:
    return "".join(x["text"] for x in lines if x["kind"] == "chunk")


CHUNKS = [("out", "a\n"), ("err", "oops\n"), ("out", "b\nc\n"), ("out", "d")]


async def test_what_is_stored_is_answered_then_the_end(api, control_plane, job):
    await _write(control_plane.plane.nats_url, job, 1, CHUNKS, end=True)
    lines = await _lines(api, job)
    assert [x["seq"] for x in lines[:-1]] == [1, 2, 3, 4]
    assert lines[-1] == {"kind": "end", "state": "pending", "attempt": 1}
    assert lines[1] == {**lines[1], "stream": "err", "text": "oops\n", "attempt": 1}
    assert _text(lines) == "a\noops\nb\nc\nd"
    resumed = await _lines(api, job, after=2)
    assert [x["seq"] for x in resumed if x["kind"] == "chunk"] == [3, 4]
    assert _text(await _lines(api, job, stream="out")) == "a\nb\nc\nd"
    assert _text(await _lines(api, job, stream="err")) == "oops\n"
    assert _text(await _lines(api, job, tail=2)) == "c\nd"
    assert _text(await _lines(api, job, tail=2, stream="err")) == "oops\n"
    assert _text(await _lines(api, job, attempt=2)) == ""


async def test_a_follow_ends_when_the_job_does(api, control_plane, job):
    await _write(control_plane.plane.nats_url, job, 1, CHUNKS[:1], end=True)
    follow = asyncio.create_task(_lines(api, job, follow=True))
    status, body = await api.post(f"{J}/{job}/cancel")
    assert status == 200, body
    lines = await follow
    assert _text(lines) == "a\n"
    assert lines[-1] == {"kind": "end", "state": "cancelled", "attempt": 1}


BAD = {
    "attempt": ["0", "-1", "x", "1.5"],
    "after": ["-1", "x"],
    "tail": ["-3", "many"],
    "stream": ["both", "stdout"],
    "follow": ["maybe"],
}


async def test_a_bad_parameter_is_a_400_naming_it(api, job):
    for key, values in BAD.items():
        for value in values:
            status, body = await api.get(f"{J}/{job}/logs?{key}={value}")
            assert status == 400, (key, value, body)
            assert key in body["error"]["message"], (key, value, body)


async def test_another_orgs_token_reads_no_log_and_an_unknown_job_is_404(api, control_plane, job):
    await _write(control_plane.plane.nats_url, job, 1, CHUNKS, end=True)
    assert (await api.post("/v1/namespaces", {"name": "rival", "org": "rivalorg"}))[0] == 201
    rival = (await api.post("/v1/namespaces/rival/tokens", {}))[1]["token"]
    shown = await api.request("GET", f"{J}/{job}", token=rival)
    answered = await api.request("GET", f"{J}/{job}/logs", token=rival)
    assert answered[0] == shown[0] in (403, 404)
    assert answered[1]["error"]["code"] == shown[1]["error"]["code"]
    # Its own namespace's path names no such job either.
    status, _ = await api.request("GET", f"/v1/namespaces/rival/jobs/{job}/logs", token=rival)
    assert status == 404
    status, body = await api.get(f"{J}/0192f0c0-0000-7000-8000-000000000000/logs")
    assert (status, body["error"]["code"]) == (404, "not_found"), body


async def test_a_follow_whose_client_left_stops_and_drops_its_consumer(api, control_plane, job, js):
    async def readers() -> int:
        return (await js.stream_info(subjects.LOGS_STREAM)).state.consumer_count

    headers = {"Authorization": f"Bearer {api.token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api.base}{J}/{job}/logs?follow=true", headers=headers) as r:
            assert r.status == 200
            await eventually(readers, until=lambda n: n == 1, timeout_s=WAIT_S, what="a reader")
    await eventually(readers, until=lambda n: n == 0, timeout_s=WAIT_S, what="no reader left")


async def test_the_sdk_reads_the_log_sync_and_async(api, control_plane, job):
    await _write(control_plane.plane.nats_url, job, 1, CHUNKS, end=True)
    configure(settings=ClientSettings(api=control_plane.api, token=control_plane.admin_token))
    try:
        inv = Invocation(job)
        lines = await asyncio.to_thread(lambda: list(inv.logs()))
        assert [type(x) for x in lines] == [LogChunk] * 4 + [LogEnd]
        assert "".join(x.text for x in lines[:-1]) == "a\noops\nb\nc\nd"
        resumed = [x async for x in inv.alogs(attempt=1, after=3)]
        assert [(x.seq, x.text) for x in resumed[:-1]] == [(4, "d")]
        assert resumed[-1] == LogEnd(state="pending", attempt=1)
    finally:
        configure()
        sync.close()
