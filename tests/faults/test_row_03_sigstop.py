"""Row 3 of the fault matrix: a daemon SIGSTOPped past its lease, then SIGCONTed, 20 times.

``test_exactly_once`` freezes a daemon once; here each of 20 cycles freezes it with two
runs in hand until another daemon has run both again, then thaws it: its late results must
all be recorded ``stale`` and none accepted.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from polling import eventually
from report import record
from tally import NS, job, runs, tally, worker_ids

Q = f"{NS}/queues"
CYCLES = 20
PER_CYCLE = 2
RUN_S = 1.0
ACK_WAIT_S = 1.0


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_twenty_freezes_past_the_lease_are_all_recorded_stale(plane_factory, daemons_for):
    handle = await plane_factory(ack_wait_s=ACK_WAIT_S, heartbeat_s=0.2, lost_after_s=1)
    daemons = daemons_for(handle.plane.nats_url)
    ids: list[str] = []
    async with asyncio.timeout(230), handle.client() as api:
        await api.post(Q, {"name": "work"})
        await daemons.start("frozen", "work", concurrency=PER_CYCLE)
        await daemons.start("rescuer", "work", concurrency=PER_CYCLE)
        await eventually(
            lambda: worker_ids(api),
            until=lambda w: len(w) == 2,
            timeout_s=30,
            what="both daemons registered",
        )
        workers = await worker_ids(api)
        for c in range(CYCLES):
            # The rescuer sits frozen (idle, holding nothing) so the frozen-to-be claims all.
            daemons.signal("rescuer", signal.SIGSTOP)
            batch = [
                {"fn": "fault_targets:work", "args": [c * PER_CYCLE + k, RUN_S]}
                for k in range(PER_CYCLE)
            ]
            status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
            assert status == 202, answer
            cycle = answer["ids"]
            ids += cycle
            await _each(api, cycle, lambda j: j["state"] == "running", "running")
            daemons.signal("frozen", signal.SIGSTOP)
            daemons.signal("rescuer", signal.SIGCONT)
            await _each(api, cycle, lambda j: j["state"] == "succeeded", "run again")
            daemons.signal("frozen", signal.SIGCONT)
            await _each(api, cycle, lambda j: j["stale"] >= 1, "the late result recorded stale")
        counts = await tally(api, ids)
    assert counts.lost == 0 and counts.states == {"succeeded": CYCLES * PER_CYCLE}, counts.odd()
    assert counts.double_recorded == 0
    superseded = 0
    for inv_id, body in counts.details.items():
        by_worker = {a["worker"]: a["outcome"] for a in body["attempts"]}
        assert by_worker.get(workers["frozen"]) == "stale", (inv_id, body["attempts"])
        assert by_worker.get(workers["rescuer"]) == "succeeded", (inv_id, body["attempts"])
        superseded += 1
    executions = runs(daemons.runs)
    assert len(executions) == 2 * CYCLES * PER_CYCLE  # every run ran twice, once per daemon
    record(
        3,
        "20-freezes",
        tried=f"{CYCLES} cycles: a daemon SIGSTOPped with {PER_CYCLE} runs of {RUN_S:g}s in hand "
        f"(ack_wait {ACK_WAIT_S:g}s) until another daemon ran them again, then SIGCONTed",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note=f"{superseded} superseded completions, all stale, none accepted",
    )


async def _each(api, ids: list[str], ok, what: str) -> None:
    async def jobs() -> list[dict]:
        return list(await asyncio.gather(*(job(api, i) for i in ids)))

    await eventually(
        jobs,
        until=lambda js: all(ok(j) for j in js),
        timeout_s=30,
        every_s=0.05,
        what=f"{len(ids)} invocations {what}",
    )
