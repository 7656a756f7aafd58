"""Row 24: the only control plane SIGKILLed while NATS runs on its own.

What holds today (the daemons' half of the row): work already stored keeps being claimed,
run and completed while no control plane runs — a daemon's claims, runs, events and
results go through JetStream alone — and the plane that comes back records every run
once, at once (the events its killed run fetched and never acked are read again when it
starts, not after the Recorder consumer's 30 s ack wait: ``bus/events.py``). The row's
other half (SDK submits and result waits while the plane is down) is the data path's next
step (docs/data-plane.md); the row is recorded when both hold.
"""

from __future__ import annotations

import asyncio

from polling import eventually
from server_proc import ServerProc, call

Q = "/v1/namespaces/default/queues"
JOBS = "/v1/namespaces/default/jobs"
#: Invocations stored before the kill, and how long each one runs (seconds).
N, RUN_S = 40, 0.05


async def _jobs(server: ServerProc) -> list[dict]:
    status, body = await call(server.api, server.token, "GET", f"{JOBS}?queue=work&limit=1000")
    assert status == 200, body
    return body["jobs"]


async def test_daemons_run_stored_work_while_the_only_plane_is_down_and_it_records_each_once(
    tmp_path, nats_server_factory, daemons_for
) -> None:
    async with asyncio.timeout(120):
        nats = await nats_server_factory()
        data = tmp_path / "data"
        first, again = ServerProc(data, nats_url=nats.url), ServerProc(data, nats_url=nats.url)
        await first.start()
        daemons = daemons_for(nats.url)
        try:
            token = first.token
            assert (await call(first.api, token, "POST", Q, {"name": "work"}))[0] == 201
            for i in range(N):
                submit = {"fn": "fault_targets:work", "args": [i, RUN_S]}
                status, body = await call(first.api, token, "POST", Q + "/work/invocations", submit)
                assert status == 202, body
            await daemons.start("d0", "work", concurrency=2)
            await eventually(
                daemons.executions, until=lambda runs: len(runs) >= 3, timeout_s=30,
                what="the daemon running the stored work",
            )  # fmt: skip
            assert await first.kill() == -9
            ran_before = len(daemons.executions())
            assert ran_before < N, "every run ended before the kill: nothing ran while down"

            # No control plane: the daemon goes on claiming and completing the rest.
            runs = await eventually(
                daemons.executions, until=lambda runs: len(runs) == N, timeout_s=60,
                what="every stored invocation run with no control plane",
            )  # fmt: skip
            assert runs == dict.fromkeys(range(N), 1), runs

            await again.start()
            jobs = await eventually(  # well inside the Recorder consumer's 30 s ack wait
                lambda: _jobs(again),
                until=lambda js: len(js) == N and all(j["state"] == "succeeded" for j in js),
                timeout_s=10,
                what="the returned plane recording every run",
            )
            for job in jobs:
                status, shown = await call(again.api, token, "GET", f"{JOBS}/{job['id']}")
                assert status == 200, shown
                outcomes = [a["outcome"] for a in shown["attempts"]]
                assert outcomes == ["succeeded"], shown  # once: no run lost or recorded twice
            assert daemons.executions() == runs  # nothing ran again on the plane's return
        finally:
            await daemons.stop_all()
            await first.stop()
            await again.stop()
