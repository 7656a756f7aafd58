"""Row 10 of the fault matrix: slow work is never redelivered while its daemon sends progress,
and a daemon never holds more claims than it has run slots.

ack_wait is 2 s here. A run of 3 x ack_wait, a function blocked on a lock for longer, one
blocked past its ``timeout_s``; then a slow daemon (each run 2.5 s, beyond ack_wait) and a
fast one sharing a queue.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from polling import eventually
from report import record
from tally import NS, all_finished, tally, worker_ids

Q = f"{NS}/queues"
ACK_WAIT_S = 2.0


def _logged(daemons) -> list[list[str]]:
    if not daemons.runs.exists():
        return []
    return [line.split() for line in daemons.runs.read_text().splitlines()]


async def test_long_and_blocked_runs_are_never_redelivered(plane_factory, daemons_for):
    handle = await plane_factory(ack_wait_s=ACK_WAIT_S, heartbeat_s=0.2, lost_after_s=1)
    daemons = daemons_for(handle.plane.nats_url)
    async with asyncio.timeout(90), handle.client() as api:
        await api.post(Q, {"name": "work"})
        await daemons.start("runner", "work", concurrency=3)
        await eventually(
            lambda: worker_ids(api),
            until=lambda w: "runner" in w,
            timeout_s=30,
            what="the runner registered",
        )
        batch = [
            {"fn": "row_targets:timed", "args": [0, 3 * ACK_WAIT_S + 0.5]},
            {"fn": "row_targets:blocked", "args": [1, 3 * ACK_WAIT_S + 1]},
            {
                "fn": "row_targets:blocked",
                "args": [2, 3 * ACK_WAIT_S],
                "timeout_s": 1.5 * ACK_WAIT_S,
            },
        ]
        status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
        assert status == 202, answer
        await eventually(
            lambda: api.get(Q + "/work/stats"),
            until=lambda r: r[1]["running"] == 3,
            timeout_s=30,
            what="3 runs in progress",
        )
        # A second daemon that would take any redelivered claim.
        await daemons.start("bystander", "work", concurrency=3)
        long_run, blocked_run, timed_out = answer["ids"]
        await all_finished(api, "work", 2, timeout_s=60)
        counts = await tally(api, answer["ids"])
    assert counts.states == {"succeeded": 2, "failed": 1}, counts.states
    assert counts.details[timed_out]["state"] == "failed"
    # Stopped for real: SIGTERM raised RunStopped in the blocked function, which ended it.
    assert counts.details[timed_out]["error"]["message"].startswith(
        f"timed out after {1.5 * ACK_WAIT_S:g} s; SIGTERM, then it exited after "
    )
    for inv_id in answer["ids"]:
        attempts = counts.details[inv_id]["attempts"]
        assert [a["epoch"] for a in attempts] == [1], (inv_id, attempts)
    assert counts.stale == 0 and counts.double_recorded == 0
    pid = daemons.procs["runner"].pid
    assert sorted(int(f[0]) for f in _logged(daemons)) == [0, 1]
    assert {int(f[1]) for f in _logged(daemons)} == {pid}
    record(
        10,
        "long-and-blocked",
        tried=f"ack_wait {ACK_WAIT_S:g}s: a run of {3 * ACK_WAIT_S + 0.5:g}s, a function "
        f"blocked on a lock for {3 * ACK_WAIT_S + 1:g}s, one blocked past its timeout_s "
        f"{1.5 * ACK_WAIT_S:g}s; a second idle daemon",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note="0 redeliveries (one attempt each); the timed-out run failed once",
    )


async def test_a_slow_and_a_fast_daemon_hold_no_more_claims_than_slots(plane_factory, daemons_for):
    handle = await plane_factory(ack_wait_s=ACK_WAIT_S, heartbeat_s=0.2, lost_after_s=1)
    daemons = daemons_for(handle.plane.nats_url)
    n = 80
    slots = {"slow": 2, "fast": 4}
    async with asyncio.timeout(90), handle.client() as api:
        await api.post(Q, {"name": "work"})
        # Every run on the slow daemon lasts 2.5 s, beyond ack_wait: it must send progress.
        await daemons.start(
            "slow",
            "work",
            concurrency=slots["slow"],
            env={"FAULTS_RUN_S": str(1.25 * ACK_WAIT_S)},
        )
        await daemons.start("fast", "work", concurrency=slots["fast"])
        batch = [{"fn": "row_targets:timed", "args": [i, 0.05]} for i in range(n)]
        status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
        assert status == 202, answer
        await all_finished(api, "work", n, timeout_s=60)
        counts = await tally(api, answer["ids"])
    assert counts.states == {"succeeded": n}, counts.odd()
    assert counts.double_recorded == 0
    redelivered = [i for i, b in counts.details.items() if len(b["attempts"]) != 1]
    assert not redelivered, [counts.details[i]["attempts"] for i in redelivered]
    by_pid: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for _, pid, start, end in _logged(daemons):
        by_pid[int(pid)].append((float(start), float(end)))
    held = {name: _most_at_once(by_pid[daemons.procs[name].pid]) for name in slots}
    ran = {name: len(by_pid[daemons.procs[name].pid]) for name in slots}
    assert all(ran.values()), ran  # both took part
    for name, most in held.items():
        assert most <= slots[name], (name, most, slots[name])
    record(
        10,
        "slow-and-fast-daemons",
        tried=f"{n} runs on a slow daemon (2 slots, each run {1.25 * ACK_WAIT_S:g}s > ack_wait) "
        "and a fast one (4 slots, 0.05s)",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note=f"0 redeliveries; runs {ran}; most claims running at once {held} (slots {slots})",
    )


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
