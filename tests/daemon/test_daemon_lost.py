"""A daemon declared lost gives its run back then, not when the run's lease runs out: the job
is ``pending`` at the lost mark, its attempt reads ``lost`` (ended when its daemon was last
heard, not counted), and the next daemon runs it at once. Real daemon processes, a real
control plane whose lease (60 s) is far longer than its lost mark (1 s)."""

from __future__ import annotations

import signal
from datetime import datetime
from pathlib import Path

import pytest_asyncio
from daemon_support import WAIT_S, J, command, wait_exists
from polling import eventually
from test_daemon_logs import log_lines, text_of

from lakeshore.model import EventType

#: A lease no test waits out: a redelivery within WAIT_S came from the lost mark.
ACK_WAIT_S = 60


@pytest_asyncio.fixture
async def control_plane(plane_factory):
    return await plane_factory(ack_wait_s=ACK_WAIT_S, heartbeat_s=0.2, lost_after_s=1)


async def test_a_lost_daemons_run_goes_back_to_its_queue_at_the_lost_mark(
    bench, processes, daemons, tmp_path: Path
):
    q = await bench.queue("lost-mark")
    victim = await processes.start("victim", "--queue", q)
    first = tmp_path / "first"
    script = (
        f"if [ -e {first} ]; then echo again; "
        f"else echo before the kill; touch {first}; exec sleep 600; fi"
    )
    [inv_id] = await bench.submit(q, command("sh", "-c", script, max_attempts=1))
    await wait_exists(first)
    await bench.job_state(inv_id, "running")

    async def printed() -> str:
        return text_of(await log_lines(bench.api, inv_id, attempt=1))

    await eventually(printed, until=lambda t: t == "before the kill\n", timeout_s=WAIT_S,
                     what="the first run's line in its log")  # fmt: skip
    victim.proc.send_signal(signal.SIGKILL)
    assert await victim.wait() == -signal.SIGKILL
    # No daemon left: the job waits in its queue, never "running" on a lost daemon.
    await bench.job_state(inv_id, "pending", timeout_s=WAIT_S)
    job = (await bench.api.get(f"{J}/{inv_id}"))[1]
    [lost] = job["attempts"]
    assert lost["outcome"] == "lost", lost
    assert lost["error"]["type"] == "lakeshore.DaemonLost"
    assert "was lost: no heartbeat for 1 s" in lost["error"]["message"]
    # It ended when its daemon was last heard, within a heartbeat or two of the kill.
    ran_s = datetime.fromisoformat(lost["ended_at"]) - datetime.fromisoformat(lost["started_at"])
    assert ran_s.total_seconds() >= 0
    # What it printed before its daemon died is kept, and readable.
    assert await printed() == "before the kill\n"
    [worker] = (await bench.api.get("/v1/namespaces/default/workers"))[1]["workers"]
    assert worker["status"] == "lost"
    heard = datetime.fromisoformat(worker["last_heartbeat"])
    assert abs((datetime.fromisoformat(lost["ended_at"]) - heard).total_seconds()) < 1
    # The next daemon runs it now, not after the 60 s lease; the lost attempt is not counted.
    await daemons.start("heir", queues=[q])
    assert await bench.events.wait_final(inv_id, timeout_s=WAIT_S) is EventType.SUCCEEDED
    await bench.job_state(inv_id, "succeeded")
    job = (await bench.api.get(f"{J}/{inv_id}"))[1]
    assert [a["outcome"] for a in job["attempts"]] == ["lost", "succeeded"]
    assert (job["counted_attempts"], job["max_attempts"]) == (1, 1)
    assert (await bench.result(inv_id, job["attempts"][1]["epoch"])).output == "again\n"
