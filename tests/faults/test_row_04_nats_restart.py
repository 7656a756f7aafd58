"""Row 4 of the fault matrix: nats-server stopped (SIGTERM) or killed (SIGKILL) mid-run and
restarted on its store.

``test_exactly_once`` kills it once and checks that nothing is lost; here both signals, with
submits going on through the outage (each retried with its idempotency key until answered
2xx): every acknowledged submit finishes exactly once, and every daemon runs work again
within 10 s of the restart.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter

import aiohttp
import pytest
from polling import eventually
from report import record
from tally import NS, all_finished, runs, tally

Q = f"{NS}/queues"
N = 600
RUN_S = 0.05
RESUME_S = 10.0


def _ran(daemons, name: str) -> int:
    pid = daemons.procs[name].pid
    return sum(p == pid for _, p in runs(daemons.runs))


class _Submitter:
    """Submits one invocation after another, each with a key, retried until 2xx."""

    def __init__(self, api) -> None:
        self.api = api
        self.ids: list[str] = []
        self.refused: Counter[int] = Counter()
        self.stop = asyncio.Event()

    async def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            body = {"fn": "fault_targets:work", "args": [N + k, 0], "idempotency_key": f"s-{k}"}

            async def submit(body=body) -> tuple[int, dict]:
                status, answer = await self.api.post(Q + "/work/invocations", body)
                if status != 202:
                    self.refused[status] += 1
                return status, answer

            status, answer = await eventually(
                submit,
                until=lambda r: r[0] == 202,
                # A connection reset as the plane changes role: sent again with its key.
                retry_on=(aiohttp.ClientConnectionError,),
                timeout_s=60,
                every_s=0.2,
                what=f"submit s-{k} accepted",
            )
            self.ids += answer["ids"]
            k += 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_every_acknowledged_submit_finishes_once_across_a_nats_restart(
    nats_server_factory, plane_factory, daemons_for, tmp_path, sig
):
    nats = await nats_server_factory(store_dir=tmp_path / "nats")
    handle = await plane_factory(ack_wait_s=2, heartbeat_s=0.2, lost_after_s=3, nats_url=nats.url)
    daemons = daemons_for(nats.url)
    async with asyncio.timeout(110), handle.client() as api:
        await api.post(Q, {"name": "work"})
        await daemons.start("d0", "work", concurrency=4)
        await daemons.start("d1", "work", concurrency=4)
        batch = [{"fn": "fault_targets:work", "args": [i, RUN_S]} for i in range(N)]
        status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
        assert status == 202, answer
        submitter = _Submitter(api)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(submitter.run())
            await eventually(
                lambda: len(runs(daemons.runs)),
                until=lambda n: n >= 100,
                timeout_s=60,
                what="100 executions",
            )
            port = nats.port
            await (nats.stop() if sig == signal.SIGTERM else nats.kill())
            await nats_server_factory(store_dir=tmp_path / "nats", port=port)
            restarted = time.monotonic()
            before = {name: _ran(daemons, name) for name in ("d0", "d1")}
            resumed = {}
            for name in ("d0", "d1"):
                await eventually(
                    lambda n=name: _ran(daemons, n),
                    until=lambda c, n=name: c > before[n],
                    timeout_s=RESUME_S,
                    every_s=0.05,
                    what=f"{name} running work again",
                )
                resumed[name] = time.monotonic() - restarted
            submitter.stop.set()
        ids = answer["ids"] + submitter.ids
        await all_finished(api, "work", len(ids), timeout_s=120, every_s=0.3)
        counts = await tally(api, ids)
    assert counts.lost == 0 and counts.states == {"succeeded": len(ids)}, counts.odd()
    assert counts.double_recorded == 0
    assert len(set(submitter.ids)) == len(submitter.ids)  # one key, one invocation
    assert {i for i, _ in runs(daemons.runs)} == set(range(N + len(submitter.ids)))
    assert max(resumed.values()) <= RESUME_S
    assert set(submitter.refused) <= {503}, submitter.refused  # refused as unavailable, no bug
    refused = sum(submitter.refused.values())
    name = "SIGTERM" if sig == signal.SIGTERM else "SIGKILL"
    record(
        4,
        name.lower(),
        tried=f"{N} runs of {RUN_S}s on 2 daemons plus submits one by one throughout; "
        f"nats-server {name} mid-run, restarted on its store",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        errors_5xx=refused,
        note=f"daemons ran work again {max(resumed.values()):.2f}s after the restart; "
        f"{refused} submit(s) refused during the outage (503) and retried with "
        f"their key: {len(submitter.ids)} acknowledged, each once",
    )
