"""Row 21: a poison invocation, one that kills the daemon running it every time, among 100
normal ones. It must end ``failed`` (dead letter) after exactly ``max_attempts`` runs, and the
100 others must all succeed. Real daemons (one run slot each, so the poison takes nobody
else's run down with it), restarted by the test as they die."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from polling import eventually
from report import record

Q = "/v1/namespaces/default/queues"
POISON = 1000
MAX_ATTEMPTS = 3
N = 100


_NEVER_DEAD_LETTERED = (
    "a claim redelivered because its daemon died is run again whatever its epoch: only "
    "should_retry, after a run that returned, compares the delivery count with max_attempts "
    "(lakeshore/daemon/job.py), so an invocation that kills its daemon runs for ever "
    "(observed: 29 daemon deaths in 60 s). Tried: failing a claim whose epoch exceeds "
    "max_attempts dead-letters the poison after exactly max_attempts, but JetStream's "
    "delivery count also grows on a drain's nak and on a SIGKILLed daemon's redelivery, so "
    "it failed 4 tests that rely on those being retried (test_daemon_lifecycle "
    "run_past_the_drain_timeout, test_daemon_process sigkilled claim, test_exactly_once "
    "2000-invocations and nats-killed, all with max_attempts=1). The fix needs the attempt "
    "history: a delivery past max_attempts asks the Recorder how the earlier ones ended"
)


@pytest.mark.xfail(strict=True, reason=_NEVER_DEAD_LETTERED)
async def test_a_poison_invocation_is_dead_lettered_after_max_attempts(plane_factory, daemons_for):
    handle = await plane_factory(ack_wait_s=2, heartbeat_s=0.2, lost_after_s=1)
    daemons = daemons_for(handle.plane.nats_url)
    names = itertools.count()
    deaths = 0

    async def keep_three() -> None:
        """Restart each daemon that dies (under a new name: the dead one's row stays)."""
        nonlocal deaths
        while True:
            live = [p for p in daemons.procs.values() if p.returncode is None]
            for _ in range(3 - len(live)):
                await daemons.start(f"d{next(names)}", "work", concurrency=1)
            live = [p for p in daemons.procs.values() if p.returncode is None]
            waits = [asyncio.ensure_future(p.wait()) for p in live]
            done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()
            deaths += len(done)

    supervisor = asyncio.create_task(keep_three())
    passed = False
    poison_job: dict = {}
    runs: dict[int, int] = {}
    try:
        async with asyncio.timeout(110), handle.client() as api:
            assert (await api.post(Q, {"name": "work"}))[0] == 201
            batch = [{"fn": "fault_targets:work", "args": [i]} for i in range(N // 2)]
            batch.append(
                {"fn": "hostile_targets:poison", "args": [POISON], "max_attempts": MAX_ATTEMPTS}
            )
            batch += [{"fn": "fault_targets:work", "args": [i]} for i in range(N // 2, N)]
            status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
            assert status == 202, answer
            poison_id = answer["ids"][N // 2]

            async def poison() -> dict:
                return (await api.get(f"/v1/namespaces/default/jobs/{poison_id}"))[1]

            async def state() -> tuple[dict, dict, dict[int, int]]:
                stats = (await api.get(Q + "/work/stats"))[1]
                return await poison(), stats, daemons.executions()

            def settled(s: tuple[dict, dict, dict[int, int]]) -> bool:
                """The others are done; the poison finished or ran once too often."""
                job, stats, runs = s
                finished = job.get("state") in ("failed", "succeeded")
                return stats["succeeded"] >= N and (finished or runs.get(POISON, 0) > MAX_ATTEMPTS)

            poison_job, stats, runs = await eventually(
                state,
                until=settled,
                timeout_s=90,
                every_s=0.2,
                what=f"{N} succeeded and the poison finished or ran {MAX_ATTEMPTS + 1} times",
            )
            assert {i for i in runs if i != POISON} == set(range(N))
            assert stats["succeeded"] == N, stats
            assert runs.get(POISON) == MAX_ATTEMPTS, f"the poison ran {runs.get(POISON)} times"
            assert poison_job["state"] == "failed", poison_job
            passed = True
    finally:
        runs = daemons.executions()
        supervisor.cancel()
        await asyncio.gather(supervisor, return_exceptions=True)
        record(
            21,
            "poison",
            tried=f"1 invocation that SIGKILLs its daemon (max_attempts {MAX_ATTEMPTS}) among "
            f"{N} normal ones; 3 daemons with one slot each, restarted as they die",
            passed=passed,
            lost=0 if passed else N - len([i for i in runs if i != POISON]),
            note=f"poison {poison_job.get('state', 'not finished')} after {runs.get(POISON, 0)} "
            f"runs; {deaths} daemon deaths; {len([i for i in runs if i != POISON])}/{N} others ran"
            + ("" if passed else f". xfail: {_NEVER_DEAD_LETTERED}"),
        )
