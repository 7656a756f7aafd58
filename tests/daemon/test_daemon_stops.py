"""Stopping a command for real: SIGTERM, the grace, SIGKILL, and nothing of the run left."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from daemon_support import WAIT_S, J, alive, command, wait_gone, wait_pid
from polling import eventually

from lakeshore.model import EventType, WorkerStatus

#: Ignores SIGTERM, as does whatever it execs (an ignored disposition survives exec).
DEAF = "trap '' TERM"


async def cancel_when_running(bench, inv_id: str) -> None:
    await bench.job_state(inv_id, "running")
    status, body = await bench.api.post(f"{J}/{inv_id}/cancel")
    assert status == 202, body


async def test_a_cancelled_command_that_traps_sigterm_checkpoints_and_ends_cancelled(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("stop-trap")
    await daemons.start("solo", queues=[q])
    pid_file, checkpoint = tmp_path / "pid", tmp_path / "checkpoint"
    script = (
        f"trap 'echo step 7 > {checkpoint}; echo checkpointed; exit 0' TERM; "
        f"echo working; echo $$ > {pid_file}; sleep 1000 & wait $!"
    )
    [inv_id] = await bench.submit(q, command("sh", "-c", script, stop_grace_s=60))
    pid = await wait_pid(pid_file)
    # Cancelled with a token of its own, whose name the job and its attempt then show.
    made = (await bench.api.post("/v1/namespaces/default/tokens", {"description": "notebook"}))[1]
    await bench.job_state(inv_id, "running")
    status, body = await bench.api.request("POST", f"{J}/{inv_id}/cancel", token=made["token"])
    assert status == 202, body
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
    assert checkpoint.read_text() == "step 7\n"
    await wait_gone(pid)
    [cancelled] = bench.events.of(EventType.CANCELLED, q)
    message = cancelled.detail["error"]["message"]
    # Within the grace: SIGTERM alone ended it.
    assert message.startswith("cancelled while running; SIGTERM, then it exited after ")
    assert "SIGKILL" not in message and cancelled.detail["exit_code"] == 0
    await bench.job_state(inv_id, "cancelled")
    status, result = await bench.api.get(f"{J}/{inv_id}/result")
    assert (status, result["ok"], result["error"]["type"]) == (200, False, "lakeshore.Cancelled")
    assert result["output"] == "working\ncheckpointed\n" and result["error"]["message"] == message
    job = (await bench.api.get(f"{J}/{inv_id}"))[1]
    assert job["error"]["message"] == message
    assert [a["outcome"] for a in job["attempts"]] == ["cancelled"]
    # Who cancelled: the token's name, on the job and on its attempt.
    by = f"notebook ({made['id']})"
    assert job["cancelled_by"] == job["attempts"][0]["cancelled_by"] == by


async def test_while_the_grace_runs_the_job_shows_its_stop_and_the_attempt_keeps_it(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("stop-shown")
    await daemons.start("solo", queues=[q])
    pid_file = tmp_path / "pid"
    script = f"{DEAF}; echo $$ > {pid_file}; exec sleep 1000"
    [inv_id] = await bench.submit(q, command("sh", "-c", script, stop_grace_s=4))
    await wait_pid(pid_file)
    status, job = await bench.api.get(f"{J}/{inv_id}")
    assert status == 200 and job["state"] == "running" and job["stopping"] is None, job
    await cancel_when_running(bench, inv_id)
    job = await eventually(
        lambda: _job(bench, inv_id), until=lambda j: j["stopping"] is not None,
        timeout_s=WAIT_S, what="the job showing its stop",
    )  # fmt: skip
    assert job["state"] == "running"
    assert job["stopping"].startswith("cancel requested; SIGTERM sent "), job["stopping"]
    assert "SIGKILL in " in job["stopping"], job["stopping"]
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
    await bench.job_state(inv_id, "cancelled")  # the control plane's record trails the bus
    job = await _job(bench, inv_id)
    assert job["stopping"] is None  # over
    [attempt] = job["attempts"]
    assert attempt["stopping"]["why"] == "cancel requested"
    assert attempt["stopping"]["grace_s"] == 4


async def _job(bench, inv_id: str) -> dict:
    status, job = await bench.api.get(f"{J}/{inv_id}")
    assert status == 200, job
    return job


async def test_a_command_that_ignores_sigterm_is_sigkilled_after_its_grace(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("stop-deaf")
    await daemons.start("solo", queues=[q])
    pid_file = tmp_path / "pid"
    script = f"{DEAF}; echo deaf; echo $$ > {pid_file}; exec sleep 1000"
    [inv_id] = await bench.submit(q, command("sh", "-c", script, stop_grace_s=1))
    pid = await wait_pid(pid_file)
    await cancel_when_running(bench, inv_id)
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
    assert not alive(pid)
    result = await bench.result(inv_id, 1)
    assert result.error.message == (
        "cancelled while running; SIGTERM, then SIGKILL after the 1 s grace"
    )
    assert (result.exit_code, result.output) == (-9, "deaf\n")


async def test_a_cancel_kills_descendants_that_left_the_group_and_frees_the_slot_at_once(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("stop-escaped")
    daemon = await daemons.start("solo", queues=[q])
    setsid_pid, forked_pid = tmp_path / "setsid", tmp_path / "forked"
    # Both ignore SIGTERM and hold the command's stdout; the main process does neither.
    script = (
        f'setsid sh -c "{DEAF}; exec sleep 1000" & echo $! > {setsid_pid}; '
        f"( ({DEAF}; exec sleep 1000) & echo $! > {forked_pid} ); "
        "exec sleep 1000"
    )
    [inv_id] = await bench.submit(q, command("sh", "-c", script))
    escaped = [await wait_pid(setsid_pid), await wait_pid(forked_pid)]
    await cancel_when_running(bench, inv_id)
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
    for pid in escaped:
        await wait_gone(pid)
    async with asyncio.timeout(WAIT_S):
        await daemon.running.dispatcher.wait_idle()
    assert daemon.running.dispatcher.snapshot().status is WorkerStatus.IDLE
    [cancelled] = bench.events.of(EventType.CANCELLED, q)
    assert "SIGTERM, then it exited after" in cancelled.detail["error"]["message"]


async def test_a_command_that_exits_leaving_a_setsid_child_on_its_stdout_succeeds_at_once(
    bench, daemons
):
    q = await bench.queue("stop-leftover")
    await daemons.start("solo", queues=[q])
    [inv_id] = await bench.submit(q, command("sh", "-c", "setsid sleep 1000 & echo $!"))
    assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    result = await bench.result(inv_id, 1)
    assert result.ok and result.exit_code == 0
    await wait_gone(int(result.output))


async def test_a_timed_out_command_that_ignores_sigterm_fails_saying_it_was_sigkilled(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("stop-timeout")
    await daemons.start("solo", queues=[q])
    pid_file = tmp_path / "pid"
    script = f"{DEAF}; echo $$ > {pid_file}; exec sleep 1000"
    [inv_id] = await bench.submit(q, command("sh", "-c", script, timeout_s=1, stop_grace_s=1))
    pid = await wait_pid(pid_file)
    assert await bench.events.wait_final(inv_id) is EventType.FAILED
    assert not alive(pid)
    result = await bench.result(inv_id, 1)
    assert result.error.type == "builtins.TimeoutError"
    assert result.error.message == "timed out after 1 s; SIGTERM, then SIGKILL after the 1 s grace"
    assert result.exit_code == -9
    [attempt] = (await _job(bench, inv_id))["attempts"]
    assert (attempt["stopping"]["why"], attempt["stopping"]["grace_s"]) == (
        "timed out after 1 s",
        1,
    )


#: Counts the SIGTERMs it gets: a line each in argv[1]; after the first it lingers a second
#: (a second SIGTERM of the same stop comes within milliseconds), then exits 0.
COUNTS_TERMS = """
import os, pathlib, signal, sys, time
terms, pid = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: terms.open("a").write("term\\n"))
pid.write_text(f"{os.getpid()}\\n")
while not terms.exists():
    time.sleep(0.01)
time.sleep(1.0)
"""


@pytest.mark.parametrize("stop", ["cancel", "timeout"])
async def test_a_stopped_command_gets_one_sigterm(bench, daemons, tmp_path: Path, stop: str):
    q = await bench.queue(f"one-term-{stop}")
    await daemons.start("solo", queues=[q])
    terms, pid_file = tmp_path / "terms", tmp_path / "pid"
    limits = {"stop_grace_s": 30, **({"timeout_s": 1} if stop == "timeout" else {})}
    spec = command(sys.executable, "-c", COUNTS_TERMS, str(terms), str(pid_file), **limits)
    [inv_id] = await bench.submit(q, spec)
    pid = await wait_pid(pid_file)
    if stop == "cancel":
        await cancel_when_running(bench, inv_id)
    await bench.events.wait_final(inv_id)
    await wait_gone(pid)
    assert terms.read_text() == "term\n"
