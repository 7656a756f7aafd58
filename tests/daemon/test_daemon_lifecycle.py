"""A daemon's life: cancel orders, retiring, draining, and what happens to its claims."""

from __future__ import annotations

import asyncio
from pathlib import Path

import daemon_jobs
from daemon_support import WAIT_S, J, W, command, fn, wait_gone, wait_pid
from natsauth import plane_nats

from lakeshore.bus.subjects import STATE_STREAM
from lakeshore.model import DaemonControl, EventType, WorkerStatus


async def test_cancel_through_the_api_kills_a_running_command(bench, daemons, tmp_path: Path):
    q = await bench.queue("life-cancel")
    daemon = await daemons.start("solo", queues=[q])
    pid_file = tmp_path / "pid"
    [inv_id] = await bench.submit(q, command("sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"))
    pid = await wait_pid(pid_file)
    await bench.job_state(inv_id, "running")
    status, _ = await bench.api.post(f"{J}/{inv_id}/cancel")
    assert status == 202
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
    await wait_gone(pid)
    await bench.job_state(inv_id, "cancelled")
    await bench.drained(q)
    async with asyncio.timeout(WAIT_S):
        await daemon.running.dispatcher.wait_idle()


async def test_cancel_discards_the_result_of_a_running_function(bench, daemons):
    q = await bench.queue("life-cancel-fn")
    daemon = await daemons.start("solo", queues=[q])
    daemon_jobs.RELEASE.clear()
    try:
        [inv_id] = await bench.submit(q, fn("block"))
        await bench.events.wait_count(EventType.STARTED, 1, queue=q)
        await bench.control(daemon.id, DaemonControl(cancel=inv_id))
        assert await bench.events.wait_final(inv_id) is EventType.CANCELLED
        await bench.drained(q)
        [after] = await bench.submit(q, fn("add", 1, 2))
        assert await bench.events.wait_final(after) is EventType.SUCCEEDED
    finally:
        daemon_jobs.RELEASE.set()
    assert bench.events.for_id(inv_id)[-1] is EventType.CANCELLED


async def test_retiring_a_worker_finishes_its_run_then_stops_it(bench, daemons, api):
    q = await bench.queue("life-retire")
    daemon = await daemons.start("solo", queues=[q])
    running, pending = await bench.submit(q, command("sleep", "0.5"), fn("noop"))
    await bench.events.wait_count(EventType.STARTED, 1, queue=q)
    status, _ = await api.delete(f"{W}/{daemon.id}")
    assert status == 202
    async with asyncio.timeout(WAIT_S):
        assert await daemon.task == 0
    assert bench.events.for_id(running)[-1] is EventType.SUCCEEDED
    assert bench.events.for_id(pending) == [EventType.SUBMITTED]
    assert await bench.depth(q) == 1
    status, body = await api.get(f"{W}/{daemon.id}")
    assert status == 200 and body["status"] == WorkerStatus.STOPPED


async def test_a_run_past_the_drain_timeout_is_interrupted_and_returned(bench, daemons):
    q = await bench.queue("life-interrupt")
    daemon = await daemons.start("solo", queues=[q], drain_timeout_s=0.3)
    [inv_id] = await bench.submit(q, command("sleep", "30"))
    await bench.events.wait_count(EventType.STARTED, 1, queue=q)
    assert await daemon.retire() == 0
    [retrying] = await bench.events.wait_count(EventType.RETRYING, 1, queue=q)
    assert retrying.invocation_id == inv_id and retrying.detail["reason"] == "interrupted"
    assert await bench.depth(q) == 1
    successor = await daemons.start("successor", queues=[q])
    started = await bench.events.wait_count(EventType.STARTED, 2, queue=q)
    assert started[-1].worker == successor.id and started[-1].epoch == 2
    await bench.control(successor.id, DaemonControl(cancel=inv_id))
    assert await bench.events.wait_final(inv_id) is EventType.CANCELLED


async def test_a_daemon_the_registry_forgot_registers_again_under_its_id(
    bench, daemons, control_plane, plane_factory, nats_server
):
    daemon = await daemons.start("survivor")
    await control_plane.stop()
    # Every row lost (the state stream and the file): the worker is unknown there.
    nc = await plane_nats(nats_server.url)
    await nc.jetstream().delete_stream(STATE_STREAM)
    await nc.close()
    successor = await plane_factory()
    async with asyncio.timeout(WAIT_S):
        await daemon.running.heartbeater.wait_beats(2)
    async with successor.client() as api:
        status, body = await api.get(f"{W}/{daemon.id}")
    assert status == 200 and body["name"] == "survivor"
    assert body["status"] in (WorkerStatus.IDLE, WorkerStatus.BUSY)
