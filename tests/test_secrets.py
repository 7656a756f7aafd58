"""Secrets are not echoed (spec/security.md, requirement 6): an invocation's ``env`` values
reach the daemon that runs it through the queue's stream, and nothing else — no API answer,
lifecycle event, history row or log line shows them (the keys may appear)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import duckdb
import msgspec
import pytest
from nats.js.errors import NotFoundError
from natsauth import plane_nats
from polling import eventually
from support import Api

from lakeshore import preparation, submission
from lakeshore.actors.queue import Submit
from lakeshore.bus import codec, subjects
from lakeshore.cli.submit import build
from lakeshore.daemon import DaemonSettings, Running, run_daemon
from lakeshore.model import (
    DaemonAccess,
    EventBatch,
    EventType,
    FastSubmit,
    Invocation,
    InvocationSubmit,
    Queue,
    now,
)
from lakeshore.model.redact import MASK, masked_env

NS = "default"
Q = f"/v1/namespaces/{NS}/queues"
J = f"/v1/namespaces/{NS}/jobs"
KEY = "AWS_SECRET_ACCESS_KEY"
SECRET = "s3cr3t-value"
ENV = {KEY: SECRET}
#: Succeeds only if the command's environment has the secret. The argv is no secret (events
#: and answers show it), so it spells the value in two pieces the shell joins.
CHECK = ["sh", "-c", f'test "${KEY}" = "{SECRET[:6]}""{SECRET[6:]}"']
WAIT_S = 15.0


@contextlib.asynccontextmanager
async def daemon(api: Api, queue: str) -> AsyncIterator[Running]:
    """An in-process daemon on ``queue`` whose own environment has no secret (so a command
    that finds it got it from its invocation); stopped, within a bound, on exit."""
    status, body = await api.post(f"/v1/namespaces/{NS}/daemons/join", {})
    assert status == 200, body
    settings = DaemonSettings(
        access=msgspec.convert(body, DaemonAccess),
        name=f"{queue}-daemon",
        queues=[queue],
        heartbeat_s=0.2,
        drain_timeout_s=5.0,
        request_timeout_s=2.0,
    )
    stop = asyncio.Event()
    ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
    environ = {"PATH": os.environ["PATH"]}
    task = asyncio.create_task(
        run_daemon(settings, stop, environ=environ, on_ready=ready.set_result)
    )
    try:
        async with asyncio.timeout(WAIT_S):
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            raise AssertionError(f"the daemon ended before it was ready: {task.result()}")
        yield ready.result()
    finally:
        stop.set()
        async with asyncio.timeout(WAIT_S):
            assert await task == 0


async def stream_messages(js: Any, stream: str, subject: str) -> list[bytes]:
    """The payload of every message of ``stream`` on ``subject``, read raw, oldest first."""
    found: list[bytes] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except NotFoundError:
            return found
        found.append(msg.data)
        seq = msg.seq + 1


async def event_messages(js: Any, queue: str) -> list[bytes]:
    """Every message of the events stream about ``queue`` (whoever published it), raw."""
    info = await js.stream_info(subjects.EVENTS_STREAM, subjects_filter=subjects.EVENTS_SUBJECTS)
    found: list[bytes] = []
    for subject in info.state.subjects or {}:
        if (subjects.event_subject_parts(subject) or ())[:2] == (NS, queue):
            found += await stream_messages(js, subjects.EVENTS_STREAM, subject)
    return found


def table_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of a stopped control plane's DuckDB file."""
    with duckdb.connect(str(path), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return {t: con.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}


async def test_env_values_reach_the_daemon_and_no_answer_event_row_or_log(
    plane_factory, nats_server, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    queue = "env-secrets"
    server = await plane_factory()
    answers: list[Any] = []
    nc = await plane_nats(nats_server.url)
    try:
        js = nc.jetstream()
        async with server.client() as api:
            status, body = await api.post(Q, {"name": queue})
            assert status == 201, body
            status, body = await api.post(
                f"{Q}/{queue}/invocations",
                {"command": CHECK, "env": ENV, "idempotency_key": "k-1"},
            )
            assert status == 202, body
            answers.append(body)
            [inv_id] = body["ids"]
            [pending] = await stream_messages(
                js, subjects.queue_stream(NS, queue), subjects.queue_subjects(NS, queue)
            )
            assert codec.decode(pending, Invocation).env == ENV  # the daemon's one source

            async with daemon(api, queue):
                status, body = await api.get(f"{J}/{inv_id}/result?wait_s={WAIT_S}")
                assert status == 200 and body["ok"] and body["exit_code"] == 0, body
                answers.append(body)
                await eventually(
                    lambda: api.get(f"{J}/{inv_id}"),
                    until=lambda answer: answer[1].get("state") == "succeeded",
                    timeout_s=WAIT_S,
                    what=f"job {inv_id} recorded as succeeded",
                )
            for path in (
                f"{J}/{inv_id}",
                f"{J}?queue={queue}",
                f"{Q}/{queue}",
                f"{Q}/{queue}/events?verbose=true",
                f"{Q}/{queue}/stats",
            ):
                status, body = await api.get(path)
                assert status == 200, (path, body)
                answers.append(body)
        events = await event_messages(js, queue)
    finally:
        await nc.close()
    await server.stop()
    rows = table_rows(server.data_dir / "lakeshore.duckdb")

    # Each event as the history records it: a claim may carry the submitted record.
    types = {
        made.type
        for raw in events
        for e in codec.decode(raw, EventBatch).events
        for made in submission.from_event(e)
        if made is not None
    }
    assert {EventType.SUBMITTED, EventType.STARTED, EventType.SUCCEEDED} <= types
    assert any(inv_id in str(r) for r in rows["invocation_events"])
    assert inv_id in caplog.text  # the jobs' log lines were captured
    assert SECRET not in json.dumps(answers)
    assert not [raw for raw in events if SECRET.encode() in raw]
    assert not {t: r for t, r in rows.items() if SECRET in str(r)}
    assert SECRET not in caplog.text
    assert not [r for r in caplog.records if SECRET in r.getMessage()]


async def test_an_actor_crashing_on_a_submit_logs_it_with_the_env_values_masked(
    plane_factory, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    server = await plane_factory(fault_points="submit.published:raise")
    async with server.client() as api:
        status, body = await api.post(Q, {"name": "env-crash"})
        assert status == 201, body
        status, body = await api.post(f"{Q}/env-crash/invocations", {"command": CHECK, "env": ENV})
    assert status == 500, body
    assert "crashed on Submit(" in caplog.text
    assert f"{KEY}': '{MASK}'" in caplog.text
    assert SECRET not in caplog.text and SECRET not in json.dumps(body)


@pytest.mark.parametrize(
    "spec",
    [
        {"command": CHECK, "env": {**ENV, "NOT_TEXT": 5}},
        {"command": CHECK, "env": {**ENV, "": "empty key"}},
        {"command": CHECK, "env": ENV, "priority": 99},
        {"command": CHECK, "env": ENV, "unknown": 1},
        {"command": CHECK, "fn": "m:f", "env": ENV},
        {"command": CHECK, "env": ENV, "priority": 3},  # a fifo queue has no priorities
    ],
)
async def test_a_refused_submit_does_not_echo_env_values(api, spec: dict[str, Any]):
    status, body = await api.post(f"{Q}/default/invocations", spec)
    assert status == 400, body
    assert SECRET not in json.dumps(body)


async def test_the_repr_of_everything_carrying_env_masks_its_values():
    spec = InvocationSubmit(command=CHECK, env=ENV)
    row = Queue(namespace=NS, name="q", created_at=now(), updated_at=now())
    [prepared] = await preparation.prepare(row, [spec], ["inv-1"])
    invocation = codec.decode(prepared.payload, Invocation)
    shown = [
        spec,
        invocation,
        Submit([spec], None),
        FastSubmit(token="t", invocations=[spec]),
        prepared,
        dict(spec.__rich_repr__()),
        dict(invocation.__rich_repr__()),
    ]
    assert SECRET not in repr(shown) and SECRET not in str(shown)
    assert f"env={masked_env(ENV)!r}" in repr(spec) and repr(masked_env(ENV)) in repr(invocation)
    assert invocation.env == ENV and spec.env == ENV  # the wire keeps the values


@pytest.mark.parametrize("item", [SECRET, f"={SECRET}", f"{KEY}:{SECRET}"])
def test_a_malformed_env_flag_of_the_cli_does_not_echo_its_value(item: str):
    with pytest.raises(click.BadParameter) as refused:
        build(("true",), None, None, None, ("A=1", item))
    assert "expected KEY=VALUE, got item 2" in refused.value.format_message()
    assert SECRET not in refused.value.format_message()
