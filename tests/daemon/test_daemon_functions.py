"""A function runs in a worker process of its daemon: reused, stoppable, crashing alone,
re-imported when its module changed; ``inline`` keeps it on a daemon thread."""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path

from daemon_support import WAIT_S, J, Q, alive, command, fn, wait_gone, wait_pid

from lakeshore.model import EventType, WorkerStatus


async def test_a_function_runs_in_a_worker_process_reused_by_the_next_run(bench, daemons):
    q = await bench.queue("fn-process")
    await daemons.start("solo", queues=[q])
    first, second = await bench.submit(q, fn("whoami"), fn("whoami"))
    for inv_id in (first, second):
        assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    one, two = (await bench.result(first, 1)).value, (await bench.result(second, 1)).value
    # Not the daemon's process (this test's, for an in-process daemon): a child of it.
    assert one["pid"] != os.getpid() and one["ppid"] == os.getpid()
    assert two["pid"] == one["pid"]  # warm: the same worker ran both
    assert (one["job"], one["attempt"], one["mark"]) == (first, "1", True)
    assert two["job"] == second


async def test_long_runs_get_a_worker_process_each_up_to_the_concurrency(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("fn-grow")
    await daemons.start("solo", queues=[q], concurrency=4)
    (met := tmp_path / "met").mkdir()
    ids = await bench.submit(q, *[fn("meet", str(met), 4) for _ in range(4)])
    for inv_id in ids:
        assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    pids = {(await bench.result(inv_id, 1)).value for inv_id in ids}
    assert len(pids) == 4  # all four ran at once, each in a worker of its own


async def test_a_worker_process_is_replaced_after_max_runs_per_process(bench, daemons):
    q = await bench.queue("fn-max-runs")
    await daemons.start("solo", queues=[q], max_runs_per_process=1)
    ids = await bench.submit(q, fn("whoami"), fn("whoami"))
    for inv_id in ids:
        assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    pids = [(await bench.result(inv_id, 1)).value["pid"] for inv_id in ids]
    assert pids[0] != pids[1]
    await wait_gone(pids[0])


async def test_an_inline_function_runs_on_a_daemon_thread(bench, daemons):
    q = await bench.queue("fn-inline")
    await daemons.start("solo", queues=[q])
    [inv_id, isolated] = await bench.submit(q, {**fn("whoami"), "isolation": "inline"}, fn("noop"))
    assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    seen = (await bench.result(inv_id, 1)).value
    # As documented: the daemon's own process, and no run variables.
    assert (seen["pid"], seen["job"], seen["mark"]) == (os.getpid(), None, False)
    await bench.job_state(inv_id, "succeeded")
    assert (await bench.api.get(f"{J}/{inv_id}"))[1]["isolation"] == "inline"
    assert await bench.events.wait_final(isolated) is EventType.SUCCEEDED
    assert (await bench.api.get(f"{J}/{isolated}"))[1]["isolation"] == "process"


async def test_inline_is_refused_for_a_command_and_a_bad_isolation_names_the_field(bench):
    q = await bench.queue("fn-inline-refused")
    status, body = await bench.api.post(
        f"{Q}/{q}/invocations", {"invocations": [command("true", isolation="inline")]}
    )
    assert status == 400 and "isolation 'inline' is for functions" in body["error"]["message"], body
    status, body = await bench.api.post(
        f"{Q}/{q}/invocations", {"invocations": [{**fn("noop"), "isolation": "thread"}]}
    )
    assert status == 400 and "isolation" in body["error"]["message"], body
    assert await bench.depth(q) == 0


async def test_a_cancelled_function_gets_run_stopped_and_its_finally_checkpoints(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("fn-cancel")
    await daemons.start("solo", queues=[q])
    checkpoint = tmp_path / "checkpoint"
    [inv_id] = await bench.submit(q, {**fn("checkpointing", str(checkpoint)), "stop_grace_s": 30})
    pid = await wait_pid(Path(f"{checkpoint}.pid"))
    await bench.job_state(inv_id, "running")
    status, body = await bench.api.post(f"{J}/{inv_id}/cancel")
    assert status == 202, body
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
    assert checkpoint.read_text() == "step 7"
    await wait_gone(pid)  # a stopped worker is not reused
    [cancelled] = bench.events.of(EventType.CANCELLED, q)
    assert cancelled.detail["error"]["message"].startswith(
        "cancelled while running; SIGTERM, then it exited after "
    )


async def test_a_stopped_function_can_catch_lakeshore_run_stopped_by_name(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("fn-catch-stop")
    await daemons.start("solo", queues=[q])
    caught = tmp_path / "caught"
    spec = {**fn("catches_its_stop", str(caught)), "stop_grace_s": 30}
    [inv_id] = await bench.submit(q, spec)
    # Stopped once it is inside its try (a timeout could come during its imports, on a
    # loaded machine, before it could catch anything).
    await wait_pid(Path(f"{caught}.pid"))
    status, body = await bench.api.post(f"{J}/{inv_id}/cancel")
    assert status == 202, body
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
    assert caught.read_text() == "lakeshore.errors.RunStopped: the run was stopped (SIGTERM)"


async def test_a_timed_out_function_is_stopped_and_its_slot_freed(bench, daemons, tmp_path: Path):
    q = await bench.queue("fn-timeout")
    daemon = await daemons.start("solo", queues=[q])
    polite, deaf = tmp_path / "polite", tmp_path / "deaf"
    ids = await bench.submit(
        q,
        {**fn("sleeps", str(polite)), "timeout_s": 1, "stop_grace_s": 5},
        {**fn("sleeps", str(deaf), deaf=True), "timeout_s": 1, "stop_grace_s": 1},
    )
    pids = [await wait_pid(polite), await wait_pid(deaf, timeout_s=WAIT_S + 5)]
    for inv_id in ids:
        assert await bench.events.wait_final(inv_id) is EventType.FAILED
    for pid in pids:
        assert not alive(pid)
    messages = [(await bench.result(inv_id, 1)).error.message for inv_id in ids]
    assert messages[0].startswith("timed out after 1 s; SIGTERM, then it exited after ")
    assert messages[1] == "timed out after 1 s; SIGTERM, then SIGKILL after the 1 s grace"
    # The attempt says how it ended, the job why it failed; `--state timed_out` finds both.
    shown = [(await bench.api.get(f"{J}/{inv_id}"))[1] for inv_id in ids]
    assert [(j["state"], j["cause"]) for j in shown] == [("failed", "timed_out")] * 2
    assert [(a["outcome"], a["killed"]) for j in shown for a in j["attempts"]] == [
        ("timed_out", False), ("timed_out", True),
    ]  # fmt: skip
    status, page = await bench.api.get(f"{J}?queue={q}&state=timed_out")
    assert status == 200 and sorted(j["id"] for j in page["jobs"]) == sorted(ids)
    status, page = await bench.api.get(f"{J}?queue={q}&state=crashed")
    assert status == 200 and page["jobs"] == []
    async with asyncio.timeout(WAIT_S):
        await daemon.running.dispatcher.wait_idle()
    assert daemon.running.dispatcher.snapshot().status is WorkerStatus.IDLE
    [after] = await bench.submit(q, fn("add", 2, 3))
    assert await bench.events.wait_final(after) is EventType.SUCCEEDED


async def test_a_crashing_function_fails_its_attempt_and_the_daemon_serves_on(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("fn-crash")
    daemon = await daemons.start("solo", queues=[q])
    segv, exits = tmp_path / "segv", tmp_path / "exit"
    ids = await bench.submit(
        q,
        {**fn("crash_first_time", str(segv)), "max_attempts": 2},
        {**fn("crash_first_time", str(exits), how="exit"), "max_attempts": 1},
    )
    assert await bench.events.wait_final(ids[0]) is EventType.SUCCEEDED
    assert await bench.events.wait_final(ids[1]) is EventType.FAILED
    assert (await bench.result(ids[0], 2)).value == "survived"
    [retrying] = [e for e in bench.events.of(EventType.RETRYING, q) if e.invocation_id == ids[0]]
    error = retrying.detail["error"]
    assert error["type"] == "lakeshore.RunCrashed"
    assert error["message"].startswith("the run's process was killed by signal 11 (SIGSEGV)")
    assert "about to crash" in error["message"]  # its last stderr lines
    failed = (await bench.result(ids[1], 1)).error
    assert failed.type == "lakeshore.RunCrashed"
    assert failed.message.startswith(
        "the run's process exited with status 3 before the function returned"
    )
    # Each attempt says it crashed and how; the failed job's cause is its crash.
    segved, exited = [(await bench.api.get(f"{J}/{inv_id}"))[1] for inv_id in ids]
    assert [(a["outcome"], a["signal"]) for a in segved["attempts"]] == [
        ("crashed", "SIGSEGV"), ("succeeded", None),
    ]  # fmt: skip
    assert (segved["cause"], segved["counted_attempts"]) == (None, 2)
    assert [(a["outcome"], a["signal"]) for a in exited["attempts"]] == [("crashed", "exit 3")]
    assert (exited["state"], exited["cause"]) == ("failed", "crashed")
    status, page = await bench.api.get(f"{J}?queue={q}&state=crashed")
    assert status == 200 and [j["id"] for j in page["jobs"]] == [ids[1]]
    assert not daemon.task.done()


async def test_an_edited_module_is_imported_again_by_the_next_run(
    bench, daemons, tmp_path: Path, monkeypatch
):
    module = tmp_path / "edited_job.py"
    module.write_text("def value():\n    return 'v1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the daemon's import path, its workers'
    q = await bench.queue("fn-edited")
    await daemons.start("solo", queues=[q])
    spec = {"fn": "edited_job:value"}
    [first] = await bench.submit(q, spec)
    assert await bench.events.wait_final(first) is EventType.SUCCEEDED
    module.write_text(textwrap.dedent("def value():\n    return 'v2'\n"))
    stat = module.stat()  # a rewrite within the same clock tick: make the change seen
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    [second] = await bench.submit(q, spec)
    assert await bench.events.wait_final(second) is EventType.SUCCEEDED
    assert [(await bench.result(i, 1)).value for i in (first, second)] == ["v1", "v2"]
    versions = [
        e.detail["code_version"]
        for e in bench.events.of(EventType.SUCCEEDED, q)
        if e.invocation_id in (first, second)
    ]
    assert len(versions) == 2 and versions[0] != versions[1]
