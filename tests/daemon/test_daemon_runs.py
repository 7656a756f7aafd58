"""Running invocations: functions, commands, results, errors, retries and timeouts."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import nats.js.errors
import pytest
from daemon_support import WAIT_S, J, command, fn, wait_gone, wait_pid
from polling import eventually

from lakeshore.bus import codec, subjects
from lakeshore.model import INLINE_RESULT_BYTES, RESULT_DETAIL, EventType, Result


async def test_a_function_runs_and_its_result_is_stored(bench, daemons):
    q = await bench.queue("runs-fn")
    daemon = await daemons.start("solo", queues=[q])
    [inv_id] = await bench.submit(q, fn("add", 2, 3))
    assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    assert bench.events.for_id(inv_id) == [
        EventType.SUBMITTED,
        EventType.STARTED,
        EventType.SUCCEEDED,
    ]
    result = await bench.result(inv_id, 1)
    assert result.ok and result.value == 5 and result.epoch == 1
    await bench.drained(q)
    assert result.worker == daemon.id
    status, body = await bench.api.get(f"{J}/{inv_id}/result?wait_s=10")
    assert status == 200 and body["value"] == 5 and body["worker"] == daemon.id


async def test_a_small_result_travels_in_its_outcome_event_and_a_large_one_in_ls_results(
    bench, daemons
):
    q = await bench.queue("runs-carried")
    await daemons.start("solo", queues=[q])
    large = "x" * INLINE_RESULT_BYTES
    small_id, large_id = await bench.submit(q, fn("add", 2, 3), fn("add", large, "y"))
    for inv_id in (small_id, large_id):
        assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    carried = {
        e.invocation_id: (e.detail or {}).get(RESULT_DETAIL)
        for e in bench.events.of(EventType.SUCCEEDED, q)
    }
    assert carried[small_id]["value"] == 5 and carried[small_id]["epoch"] == 1
    assert carried[large_id] is None
    kv = await bench.js.key_value(subjects.RESULTS_BUCKET)
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get(subjects.result_key("default", small_id, 1))
    stored = await kv.get(subjects.result_key("default", large_id, 1))
    assert codec.decode(stored.value, Result).value == large + "y"
    for inv_id, value in ((small_id, 5), (large_id, large + "y")):
        status, body = await bench.api.get(f"{J}/{inv_id}/result?wait_s=10")
        assert status == 200 and body["value"] == value, body


async def test_a_coroutine_function_is_awaited(bench, daemons):
    q = await bench.queue("runs-async")
    await daemons.start("solo", queues=[q])
    [inv_id] = await bench.submit(q, fn("async_double", 21))
    assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    assert (await bench.result(inv_id, 1)).value == 42


async def test_a_command_keeps_its_exit_code_and_the_tails_of_stdout_and_stderr(bench, daemons):
    q = await bench.queue("runs-cmd")
    await daemons.start("solo", queues=[q])
    script = (
        "head -c 70000 /dev/zero | tr '\\0' x; echo; echo to-stderr >&2; echo $GREETING; "
        "head -c 70000 /dev/zero | tr '\\0' y >&2; echo last-err >&2"
    )
    ok_id, bad_id = await bench.submit(
        q,
        command("sh", "-c", script, env={"GREETING": "hello"}),
        command("sh", "-c", "echo failing; echo why >&2; exit 3"),
    )
    assert await bench.events.wait_final(ok_id) is EventType.SUCCEEDED
    ok = await bench.result(ok_id, 1)
    assert ok.ok and ok.exit_code == 0
    assert len(ok.output.encode()) == 64 * 1024
    assert ok.output.endswith("x\nhello\n")
    assert len(ok.stderr.encode()) == 64 * 1024
    assert ok.stderr.endswith("yylast-err\n") and "to-stderr" not in ok.output
    assert await bench.events.wait_final(bad_id) is EventType.FAILED
    bad = await bench.result(bad_id, 1)
    assert not bad.ok and bad.exit_code == 3
    assert (bad.output, bad.stderr) == ("failing\n", "why\n")
    assert bad.error.type == "subprocess.CalledProcessError"
    [failed] = bench.events.of(EventType.FAILED)
    assert failed.detail["exit_code"] == 3


async def test_a_function_error_carries_its_remote_type_and_traceback(bench, daemons):
    q = await bench.queue("runs-error")
    await daemons.start("solo", queues=[q])
    boom_id, missing_id = await bench.submit(
        q, fn("explode", "no luck"), {"fn": "no_such_module:f"}
    )
    assert await bench.events.wait_final(boom_id) is EventType.FAILED
    error = (await bench.result(boom_id, 1)).error
    assert error.type == "daemon_jobs.Boom" and error.message == "no luck"
    assert "Traceback" in error.traceback and "in explode" in error.traceback
    assert await bench.events.wait_final(missing_id) is EventType.FAILED
    assert (await bench.result(missing_id, 1)).error.type == "builtins.ModuleNotFoundError"


async def test_failed_attempts_retry_with_backoff_then_fail_and_leave_the_stream(bench, daemons):
    q = await bench.queue("runs-retry")
    await daemons.start("solo", queues=[q])
    [inv_id] = await bench.submit(q, {**fn("explode", "again"), "max_attempts": 3})
    assert await bench.events.wait_final(inv_id) is EventType.FAILED
    events = [e for e in bench.events.events if e.invocation_id == inv_id]
    retrying = [e for e in events if e.type is EventType.RETRYING]
    assert [(e.attempt, e.detail["delay_s"]) for e in retrying] == [(1, 1.0), (2, 2.0)]
    started = [e for e in events if e.type is EventType.STARTED]
    assert [e.epoch for e in started] == [1, 2, 3]
    # Each execution's events carry its own run id (the epoch alone may repeat).
    runs = {(e.epoch, e.detail["run"]) for e in events if e.epoch is not None}
    assert sorted(epoch for epoch, _ in runs) == [1, 2, 3]
    assert len({run for _, run in runs}) == 3
    gaps = [(b.ts - a.ts).total_seconds() for a, b in zip(started, started[1:], strict=False)]
    assert gaps[0] >= 1.0 and gaps[1] >= 2.0
    result = await bench.result(inv_id, 3)
    assert not result.ok and result.epoch == 3 and result.error.type == "daemon_jobs.Boom"
    await bench.drained(q)
    await bench.job_state(inv_id, "failed")
    job = (await bench.api.get(f"{J}/{inv_id}"))[1]
    assert [a["outcome"] for a in job["attempts"]] == ["retrying", "retrying", "failed"]


async def test_a_command_past_its_timeout_is_killed_with_its_children(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("runs-timeout")
    await daemons.start("solo", queues=[q])
    pids = tmp_path / "pids"
    script = f"sleep 30 & echo $! > {pids}; echo started; wait"
    [inv_id] = await bench.submit(q, command("sh", "-c", script, timeout_s=1.5))
    sleeper = await wait_pid(pids)
    assert await bench.events.wait_final(inv_id) is EventType.FAILED
    result = await bench.result(inv_id, 1)
    assert result.error.type == "builtins.TimeoutError"
    assert result.error.message.startswith("timed out after 1.5 s; SIGTERM, then it exited after")
    assert result.exit_code == -15 and result.output == "started\n" and result.stderr == ""
    await wait_gone(sleeper)


async def test_a_command_sees_its_job_id_and_attempt(bench, daemons):
    q = await bench.queue("runs-env")
    await daemons.start("solo", queues=[q])
    script = 'echo "$LAKESHORE_JOB_ID $LAKESHORE_ATTEMPT"'
    [inv_id] = await bench.submit(q, command("sh", "-c", script, env={"LAKESHORE_JOB_ID": "mine"}))
    assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    assert (await bench.result(inv_id, 1)).output == f"{inv_id} 1\n"


async def test_a_result_over_the_nats_max_payload_fails_the_attempt(bench, daemons):
    q = await bench.queue("runs-big")
    await daemons.start("solo", queues=[q])
    [inv_id] = await bench.submit(q, fn("big", 2_000_000))
    assert await bench.events.wait_final(inv_id) is EventType.FAILED
    error = (await bench.result(inv_id, 1)).error
    assert error.type == "lakeshore.ResultTooLarge" and "max_payload" in error.message
    # the failure is recorded before the delivery's ack lands: the queue empties after it
    await eventually(lambda: bench.depth(q), until=lambda n: n == 0, timeout_s=5, what="depth 0")


async def test_a_result_the_server_refuses_for_a_while_is_stored_in_the_same_attempt(
    bench, daemons, caplog
):
    """While ``LS_RESULTS`` refuses puts (here: its message size is cut to one byte, as a
    reconnect or a stream election would fail them), the daemon holds the claim and stores
    the result again, instead of leaving it to a redelivery an ``ack_wait`` later (results
    too large for their outcome event: a small one is not put there)."""
    caplog.set_level(logging.INFO, logger="lakeshore.daemon.policies.retries")
    q = await bench.queue("runs-refused")
    await daemons.start("solo", queues=[q])
    stream = f"KV_{subjects.RESULTS_BUCKET}"
    large = "x" * INLINE_RESULT_BYTES
    config = (await bench.js.stream_info(stream)).config
    await bench.js.update_stream(dataclasses.replace(config, max_msg_size=1))
    try:
        ids = await bench.submit(q, *[fn("add", large, str(i)) for i in range(3)])
        await eventually(
            lambda: [r for r in caplog.records if "result not stored" in r.getMessage()],
            until=lambda refused: len({r.getMessage()[:36] for r in refused}) == len(ids),
            timeout_s=WAIT_S,
            what="every put refused once",
        )
    finally:
        await bench.js.update_stream(config)
    succeeded = await bench.events.wait_count(EventType.SUCCEEDED, len(ids), queue=q)
    assert {(e.invocation_id, e.epoch) for e in succeeded} == {(i, 1) for i in ids}
    assert [(await bench.result(i, 1)).value for i in ids] == [large + str(i) for i in range(3)]
