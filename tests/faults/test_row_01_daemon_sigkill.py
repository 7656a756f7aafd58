"""Row 1 of the fault matrix: daemons SIGKILLed 5 times during a run of N invocations.

``test_exactly_once`` kills one daemon once; this kills five, one after the other while the
run goes on (each replaced by a new daemon), and measures how soon each killed daemon's
claims are redelivered: within ack_wait + 2 heartbeats of the kill.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
from datetime import datetime

from polling import eventually
from report import record
from tally import NS, all_finished, runs, tally, worker_ids

Q = f"{NS}/queues"
N = 800
RUN_S = 0.15
KILLS = 5
ACK_WAIT_S = 2.0
HEARTBEAT_S = 0.2  # the fault daemons' --heartbeat-s (tests/faults/conftest.py)
BOUND_S = ACK_WAIT_S + 2 * HEARTBEAT_S


def _ran_by(daemons, name: str) -> int:
    pid = daemons.procs[name].pid
    return sum(p == pid for _, p in runs(daemons.runs))


async def test_five_sigkills_during_a_run_lose_nothing_and_redeliver_in_time(
    plane_factory, daemons_for
):
    handle = await plane_factory(ack_wait_s=ACK_WAIT_S, heartbeat_s=HEARTBEAT_S, lost_after_s=1)
    daemons = daemons_for(handle.plane.nats_url)
    async with asyncio.timeout(110), handle.client() as api:
        await api.post(Q, {"name": "work"})
        live = ["d0", "d1", "d2"]
        for name in live:
            await daemons.start(name, "work", concurrency=4)
        # A run may be on each daemon killed (its claims go to the daemons killed next): it is
        # lost up to KILLS times in a row, which the default max_lost (3) would rightly end
        # as a poison pill (row 21's subject, not this row's). CI once saw that, 1 of 800.
        batch = [
            {"fn": "fault_targets:work", "args": [i, RUN_S], "max_lost": KILLS + 1}
            for i in range(N)
        ]
        status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
        assert status == 202, answer
        ids = answer["ids"]
        killed: dict[str, float] = {}  # worker name -> wall-clock time of its SIGKILL
        for k in range(KILLS):
            victim = live.pop(0)
            # Mid-run: it has been running work for a while (its slots are full).
            await eventually(
                lambda v=victim: _ran_by(daemons, v),
                until=lambda n: n >= 8,
                timeout_s=60,
                what=f"{victim} running work",
            )
            daemons.signal(victim, signal.SIGKILL)
            killed[victim] = time.time()
            await daemons.procs[victim].wait()
            heir = f"r{k}"
            live.append(heir)
            await daemons.start(heir, "work", concurrency=4)
            # The next kill waits until the heir runs work: a kill while the other daemons
            # are still starting would measure their start-up, not the redelivery.
            await eventually(
                lambda h=heir: _ran_by(daemons, h),
                until=lambda n: n >= 1,
                timeout_s=60,
                what=f"{heir} running work",
            )
        await all_finished(api, "work", N, timeout_s=120)
        counts = await tally(api, ids)
        ids_of = await worker_ids(api)
    assert counts.lost == 0, counts.states
    assert counts.states == {"succeeded": N}, counts.odd()
    assert counts.double_recorded == 0
    by_kill = _redelivery_delays(counts.details.values(), {ids_of[n]: t for n, t in killed.items()})
    assert by_kill, "no claim of a killed daemon was redelivered"
    # NATS redelivers each killed daemon's claims within the bound: the first of them is
    # claimed by then, and so are the redeliveries as a whole. The others of one kill,
    # redelivered at the same moment, wait for a free slot of the saturated daemons (and,
    # on a shared 2-core machine, for the CPU): their worst is the row's report, not a
    # wall-clock assert.
    firsts = {since: min(d) for since, d in by_kill.items()}
    assert max(firsts.values()) <= BOUND_S, sorted(by_kill.values())
    delays = [d for ds in by_kill.values() for d in ds]
    assert statistics.median(delays) <= BOUND_S, sorted(delays)
    executions = len(runs(daemons.runs))
    record(
        1,
        "5-sigkills",
        tried=f"{N} runs of {RUN_S}s on 3 daemons (4 slots each); {KILLS} daemons SIGKILLed "
        "one after the other mid-run, each replaced",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note=f"{len(delays)} claims of killed daemons redelivered, kill → next attempt "
        f"claimed: first after each kill at most {max(firsts.values()):.2f}s; all: median "
        f"{statistics.median(delays):.2f}s, max {max(delays):.2f}s (bound ack_wait "
        f"{ACK_WAIT_S:g}s + 2 heartbeats = {BOUND_S:g}s); "
        f"{executions - N} duplicate executions",
    )


def _redelivery_delays(jobs, kill_at: dict[str, float]) -> dict[float, list[float]]:
    """Per kill (its time), per attempt it cut short: seconds from the kill to the next
    attempt's claim (the redelivery: its daemon took the delivery; the run starts once that
    is stored).

    When the next attempt's epoch skips one, the delivery in between went to a daemon that
    was killed before it ran it (kills come close together): the bound then runs from that
    later kill, and there must be one.
    """
    kills = sorted(kill_at.values())
    delays: dict[float, list[float]] = {}
    for body in jobs:
        attempts = body["attempts"]
        for a, nxt in zip(attempts, attempts[1:], strict=False):
            if a["worker"] in kill_at and nxt["claimed_at"] is not None:
                started = datetime.fromisoformat(nxt["claimed_at"]).timestamp()
                since = kill_at[a["worker"]]
                if nxt["epoch"] > a["epoch"] + 1:
                    later = [t for t in kills if since < t < started]
                    assert later, f"a delivery of {body['id']} vanished with no kill: {attempts}"
                    since = later[-1]
                delays.setdefault(since, []).append(started - since)
    return delays
