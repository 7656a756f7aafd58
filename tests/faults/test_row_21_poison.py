"""Row 21: a poison invocation, one that kills the daemon running it every time, among 100
normal ones. Its attempts are lost, not failed (spec/runs.md §4): they do not count toward
``max_attempts`` (1 here), and after exactly ``max_lost`` (the default, 3) lost in a row it
ends ``failed`` with reason ``lost_too_often`` without a fourth run; the 100 others all
succeed. Real daemons (one run slot each, so the poison takes nobody else's run down with
it), restarted by the test as they die."""

from __future__ import annotations

import asyncio
import itertools

from polling import eventually
from report import record

Q = "/v1/namespaces/default/queues"
POISON = 1000
MAX_LOST = 3
N = 100


async def test_a_poison_invocation_fails_as_lost_too_often_after_max_lost(
    plane_factory, daemons_for
):
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
            batch.append({"fn": "hostile_targets:poison", "args": [POISON]})
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
                return stats["succeeded"] >= N and (finished or runs.get(POISON, 0) > MAX_LOST)

            poison_job, stats, runs = await eventually(
                state,
                until=settled,
                timeout_s=90,
                every_s=0.2,
                what=f"{N} succeeded and the poison finished or ran {MAX_LOST + 1} times",
            )
            assert {i for i in runs if i != POISON} == set(range(N))
            assert stats["succeeded"] == N, stats
            ran = runs.get(POISON)
            assert ran == MAX_LOST, f"the poison ran {ran} times: {poison_job.get('attempts')}"
            assert poison_job["state"] == "failed", poison_job
            assert poison_job["error"]["type"] == "lakeshore.LostTooOften", poison_job
            assert f"lost {MAX_LOST} attempts in a row" in poison_job["error"]["message"]
            outcomes = [a["outcome"] for a in poison_job["attempts"]]
            assert outcomes == ["lost"] * MAX_LOST, poison_job["attempts"]
            assert poison_job["counted_attempts"] == 0, poison_job
            passed = True
    finally:
        runs = daemons.executions()
        supervisor.cancel()
        await asyncio.gather(supervisor, return_exceptions=True)
        record(
            21,
            "poison",
            tried=f"1 invocation that SIGKILLs its daemon (max_lost {MAX_LOST}, max_attempts 1) "
            f"among {N} normal ones; 3 daemons with one slot each, restarted as they die",
            passed=passed,
            lost=0 if passed else N - len([i for i in runs if i != POISON]),
            note=f"poison {poison_job.get('state', 'not finished')} after {runs.get(POISON, 0)} "
            f"runs; {deaths} daemon deaths; {len([i for i in runs if i != POISON])}/{N} others ran",
        )
