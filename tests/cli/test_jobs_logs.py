"""``lakeshore jobs logs``: a job's output as it comes, against a real control plane and a
real daemon (``lakeshore daemon run``); ``-f`` runs as a user's shell runs it, a process
whose output is read as it prints."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator

import pytest
from support import daemon_process

from lakeshore.cli.exits import API_ERROR

QUEUE = "logs-cli"
WAIT_S = 30.0
#: A line every 0.3 s for about 3 s.
TICKS = (
    "import time\nfor i in range(10):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.3)\n"
)


@pytest.fixture
async def queue(api) -> str:
    status, body = await api.post("/v1/namespaces/default/queues", {"name": QUEUE})
    assert status == 201, body
    return QUEUE


@pytest.fixture
async def daemon(control_plane, queue, tmp_path) -> AsyncIterator[None]:
    async with daemon_process(control_plane, queue, "logs-daemon", tmp_path, tmp_path / "d.log"):
        yield


async def _submit(cli, *argv: str) -> str:
    return (await cli("submit", "--queue", QUEUE, "--", *argv)).stdout.strip()


async def _state(cli, job: str) -> str:
    shown = await cli("jobs", "show", job, "-o", "json")
    return json.loads(shown.stdout)["state"]


async def _follow(control_plane, job: str) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "LAKESHORE_API": control_plane.api,
        "LAKESHORE_TOKEN": control_plane.admin_token,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lakeshore", "jobs", "logs", job, "-f",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_logs_f_shows_lines_while_the_job_runs_then_exits_0(
    cli, control_plane, queue, daemon
):
    job = await _submit(cli, sys.executable, "-c", TICKS)
    proc = await _follow(control_plane, job)
    assert proc.stdout is not None
    async with asyncio.timeout(WAIT_S):
        early = [await proc.stdout.readline() for _ in range(3)]
        assert early == [b"tick 0\n", b"tick 1\n", b"tick 2\n"]
        assert await _state(cli, job) == "running"  # seen before the job ended
        rest, err = await proc.communicate()
    assert proc.returncode == 0, err
    assert rest.decode().splitlines() == [f"tick {i}" for i in range(3, 10)]


async def test_logs_f_of_a_failing_job_exits_1_with_its_stderr_on_stderr(
    cli, control_plane, queue, daemon
):
    job = await _submit(cli, "sh", "-c", "echo out; echo bad >&2; exit 3")
    proc = await _follow(control_plane, job)
    async with asyncio.timeout(WAIT_S):
        out, err = await proc.communicate()
    assert proc.returncode == 1
    assert out == b"out\n"
    assert err.decode().startswith("bad\nerror: invocation ") and "ended failed" in err.decode()


async def test_logs_prints_what_is_stored_and_filters_streams(cli, queue, daemon):
    job = await _submit(cli, "sh", "-c", "echo one; echo two >&2; echo three")
    await cli("jobs", "result", job, "--wait", "30")
    both = await cli("jobs", "logs", job)
    assert (both.stdout, both.stderr) == ("one\nthree\n", "two\n")
    out = await cli("jobs", "logs", job, "--stdout", "--tail", "1")
    assert (out.stdout, out.stderr) == ("three\n", "")
    err = await cli("jobs", "logs", job, "--stderr")
    assert (err.stdout, err.stderr) == ("", "two\n")
    assert (await cli("jobs", "logs", job, "--attempt", "7")).stdout == ""


async def test_logs_of_an_unknown_job_exits_1(cli):
    result = await cli("jobs", "logs", "0192f0c0-0000-7000-8000-000000000000", expect=API_ERROR)
    assert result.stderr.startswith("error: no job ")
