"""The daemon as a process: SIGTERM drains and exits 0; a SIGKILLed daemon's claim moves on."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from daemon_support import NS, WAIT_S, J, W, alive, command, fn, wait_exists, wait_gone, wait_pid
from nats.js.api import AckPolicy, ConsumerConfig
from polling import eventually

from lakeshore.bus import subjects
from lakeshore.cli import exits
from lakeshore.model import EventType, WorkerStatus


async def test_sigterm_finishes_the_current_run_and_exits_0(bench, processes, api):
    q = await bench.queue("proc-term")
    daemon = await processes.start("termed", "--queue", q)
    running, pending = await bench.submit(q, command("sleep", "0.5"), fn("noop"))
    await bench.events.wait_count(EventType.STARTED, 1, queue=q)
    daemon.proc.send_signal(signal.SIGTERM)
    assert await daemon.wait() == 0, daemon.output
    assert await bench.events.wait_final(running) is EventType.SUCCEEDED
    assert bench.events.for_id(pending) == [EventType.SUBMITTED]
    assert await bench.depth(q) == 1
    line = await daemon.wait_line("registered as")
    worker_id = line.split("(")[1].split(")")[0]
    assert (await api.get(f"{W}/{worker_id}"))[1]["status"] == WorkerStatus.STOPPED
    assert "retiring (SIGTERM)" in daemon.output


async def test_a_sigkilled_daemons_claim_is_redelivered_to_another_daemon(
    bench, processes, daemons, tmp_path: Path
):
    q = await bench.queue("proc-kill")
    # A short lease, set on the consumer as the control plane would (it owns ack_wait).
    await bench.js.add_consumer(
        subjects.queue_stream(NS, q),
        ConsumerConfig(
            durable_name=subjects.level_consumer(0),
            filter_subject=subjects.level_subject(NS, q, 0),
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=1.0,
            max_ack_pending=10_000,
        ),
    )
    victim = await processes.start("victim", "--queue", q)
    marker = tmp_path / "marker"
    [inv_id] = await bench.submit(q, fn("hang_first_time", str(marker)))
    [first] = await bench.events.wait_count(EventType.STARTED, 1, queue=q)
    await wait_exists(marker)  # the first run is under way, not just announced
    victim.proc.send_signal(signal.SIGKILL)
    assert await victim.wait() == -signal.SIGKILL
    heir = await daemons.start("heir", queues=[q])
    assert await bench.events.wait_final(inv_id) is EventType.SUCCEEDED
    [done] = bench.events.of(EventType.SUCCEEDED, q)
    # The heir hands a redelivery back while the killed daemon has been silent for less
    # than lost_after_s (it may still be running it: policies/redelivery.py), so with a 1 s
    # lease it may run under a later epoch than 2 — once.
    assert done.worker == heir.id and done.epoch >= 2 and first.epoch == 1
    assert (await bench.result(inv_id, done.epoch)).value == "second run"
    await bench.drained(q)
    await bench.job_state(inv_id, "succeeded")
    job = (await bench.api.get(f"{J}/{inv_id}"))[1]
    # The second execution is attempt 2 whatever its delivery count (hand-backs raise that).
    assert job["worker"] == heir.id and job["attempt"] == 2 and job["stale"] == 0
    assert [(a["attempt"], a["epoch"]) for a in job["attempts"]] == [(1, 1), (2, done.epoch)]
    async with asyncio.timeout(WAIT_S):
        await heir.running.dispatcher.wait_idle()


async def test_a_sigkilled_daemon_leaves_nothing_of_its_runs_behind(bench, processes, tmp_path):
    # A SIGKILLed daemon ends nothing itself, and only its worker processes die with it: a
    # command, and what a run started in a session of its own, would run on beside the
    # redelivery. Its watchdog kills every process its runs started.
    q = await bench.queue("proc-leftovers")
    victim = await processes.start("victim", "--queue", q, "--concurrency", "2")
    shell, away, hanging = tmp_path / "shell", tmp_path / "away", tmp_path / "hanging"
    script = f"setsid sleep 3600 & echo $! > {away}; echo $$ > {shell}; wait"
    await bench.submit(q, command("sh", "-c", script), fn("hangs_with_a_child", str(hanging)))
    pids = [await wait_pid(shell), await wait_pid(away)]
    text = await eventually(
        lambda: hanging.read_text() if hanging.exists() else "",
        until=lambda t: t.endswith("\n"),
        timeout_s=WAIT_S,
        what="the function's child and worker pids",
    )
    pids += [int(p) for p in text.split()]
    assert all(alive(pid) for pid in pids)
    victim.proc.send_signal(signal.SIGKILL)
    assert await victim.wait() == -signal.SIGKILL
    for pid in pids:
        await wait_gone(pid)


async def test_a_daemon_waits_for_an_unreachable_nats_until_sigterm(bench, processes):
    daemon = await processes.start("early", url="nats://127.0.0.1:1", ready="Connect call failed")
    daemon.proc.send_signal(signal.SIGTERM)
    assert await daemon.wait() == 0, daemon.output
    assert "stopped before NATS" in daemon.output


async def test_a_daemon_joins_with_lakeshore_token_and_exits_refused_once_it_is_revoked(
    processes, api
):
    created = (await api.post(f"/v1/namespaces/{NS}/tokens", {"description": "gpu box"}))[1]
    token, token_id = created["token"], created["id"]
    daemon = await processes.start("revoked", token=token)
    assert token not in " ".join(daemon.proc_args), "the token is on the command line"
    assert (await api.delete(f"/v1/namespaces/{NS}/tokens/{token_id}"))[0] == 200
    assert await daemon.wait() == exits.REFUSED, daemon.output
    told = [line for line in daemon.lines if "token revoked:" in line]
    assert len(told) == 1 and "this daemon stops" in told[0], daemon.output
    assert "LAKESHORE_TOKEN=<token> lakeshore daemon run --api URL" in told[0]
    assert daemon.lines[-1] == told[0], "the last line says why it stopped"
    assert token not in daemon.output
