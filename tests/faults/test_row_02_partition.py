"""Row 2 of the fault matrix: a daemon cut from NATS by a TCP proxy (blackhole, then reset),
then healed: nothing lost, nothing recorded twice, late results recorded stale, and the
daemon pulls again within 10 s of the heal."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlparse

from polling import eventually
from proxy import TcpProxy
from report import record
from tally import NS, all_finished, runs, tally, worker_ids

Q = f"{NS}/queues"
N = 160
RUN_S = 0.3
#: How soon after the heal the cut daemon must run new work (seconds).
PULL_AGAIN_S = 10.0


async def _setup(plane_factory, daemons_for, proxy: TcpProxy):
    handle = await plane_factory(ack_wait_s=2, heartbeat_s=0.2, lost_after_s=1)
    behind = daemons_for(proxy.url)
    direct = daemons_for(handle.plane.nats_url)
    return handle, behind, direct


async def _submit(api, n: int, first: int = 0) -> list[str]:
    batch = [{"fn": "fault_targets:work", "args": [i, RUN_S]} for i in range(first, first + n)]
    status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
    assert status == 202, answer
    return answer["ids"]


def _ran_by(daemons, name: str) -> int:
    pid = daemons.procs[name].pid
    return sum(p == pid for _, p in runs(daemons.runs))


async def _redelivered(api, ids: list[str]) -> None:
    """Wait until some invocation runs (or ran) a second attempt: past the cut's ack_wait."""

    async def attempts() -> int:
        status, body = await api.get(f"{NS}/jobs?queue=work&limit=1000")
        assert status == 200, body
        return max((j["attempt"] for j in body["jobs"] if j["id"] in wanted), default=0)

    wanted = set(ids)

    await eventually(
        attempts,
        until=lambda a: a >= 2,
        timeout_s=30,
        every_s=0.2,
        what="a redelivered attempt of the cut daemon's work",
    )


async def _pulls_again(behind, since: int) -> float:
    healed = time.monotonic()
    await eventually(
        lambda: _ran_by(behind, "cut"),
        until=lambda n: n > since,
        timeout_s=PULL_AGAIN_S,
        every_s=0.05,
        what="the healed daemon running new work",
    )
    return time.monotonic() - healed


async def _check(api, ids: list[str]) -> tuple:
    counts = await tally(api, ids)
    assert counts.lost == 0, counts.states
    assert set(counts.states) == {"succeeded"}, counts.odd()
    assert counts.double_recorded == 0
    for inv_id, body in counts.details.items():
        outcomes = [a["outcome"] for a in body["attempts"]]
        assert outcomes.count("succeeded") == 1, (inv_id, outcomes)
        assert set(outcomes) <= {"succeeded", "stale", "lost"}, (inv_id, outcomes)
        # A completion that lost the race is stale, never a second outcome.
        assert body["stale"] >= sum(o == "stale" for o in outcomes), (inv_id, body)
    return counts


async def test_a_blackholed_daemon_is_fenced_and_pulls_again_after_the_heal(
    plane_factory, daemons_for, nats_server
):
    url = urlparse(nats_server.url)
    async with asyncio.timeout(110), TcpProxy(url.hostname, url.port) as proxy:
        handle, behind, direct = await _setup(plane_factory, daemons_for, proxy)
        async with handle.client() as api:
            await api.post(Q, {"name": "work"})
            await behind.start("cut", "work", concurrency=4)
            await direct.start("rescuer", "work", concurrency=4)
            ids = await _submit(api, N)
            await eventually(
                lambda: _ran_by(behind, "cut"),
                until=lambda n: n >= 6,
                timeout_s=60,
                what="the daemon behind the proxy running work",
            )
            proxy.blackhole()
            # Shorter than the daemon's 5 s request timeout: its results and acks are held,
            # not abandoned, and arrive after the rescuer has run the same attempts again.
            await _redelivered(api, ids)
            ran = _ran_by(behind, "cut")
            proxy.heal()
            pull_s = await _pulls_again(behind, ran)
            await all_finished(api, "work", N, timeout_s=90)
            counts = await _check(api, ids)
    record(
        2,
        "blackhole-heal",
        tried=f"{N} runs of {RUN_S}s on 2 daemons (4 slots each), one behind a TCP proxy "
        "blackholed for ack_wait (2 s) + a redelivery, then healed",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note=f"pulled again {pull_s:.2f}s after the heal",
    )


async def test_a_blackholed_then_reset_daemon_reconnects_and_pulls_again(
    plane_factory, daemons_for, nats_server
):
    url = urlparse(nats_server.url)
    async with asyncio.timeout(110), TcpProxy(url.hostname, url.port) as proxy:
        handle, behind, direct = await _setup(plane_factory, daemons_for, proxy)
        async with handle.client() as api:
            await api.post(Q, {"name": "work"})
            await behind.start("cut", "work", concurrency=4)
            await direct.start("rescuer", "work", concurrency=2)
            # Long enough that the rescuer alone is still busy when the cut daemon is back.
            ids = await _submit(api, 2 * N)
            await eventually(
                lambda: _ran_by(behind, "cut"),
                until=lambda n: n >= 6,
                timeout_s=60,
                what="the daemon behind the proxy running work",
            )
            proxy.blackhole()
            cut_id = (await worker_ids(api))["cut"]

            async def cut_status() -> str:
                return (await api.get(f"{NS}/workers/{cut_id}"))[1]["status"]

            # Past the daemon's request timeout and the registry's lost_after: it is lost.
            await eventually(
                cut_status,
                until=lambda s: s == "lost",
                timeout_s=30,
                what="the cut daemon marked lost",
            )
            await _redelivered(api, ids)
            accepted = proxy.accepted
            proxy.reset()
            await eventually(
                lambda: proxy.accepted,
                until=lambda n: n > accepted,
                timeout_s=30,
                what="the daemon trying to reconnect",
            )
            ran = _ran_by(behind, "cut")
            proxy.heal()
            pull_s = await _pulls_again(behind, ran)
            await eventually(
                cut_status,
                until=lambda s: s in ("idle", "busy"),
                timeout_s=10,
                what="the healed daemon back from lost",
            )
            await all_finished(api, "work", 2 * N, timeout_s=120)
            counts = await _check(api, ids)
    record(
        2,
        "blackhole-reset-heal",
        tried=f"{2 * N} runs of {RUN_S}s on 2 daemons, one behind a TCP proxy blackholed until "
        "marked lost and redelivered, then every connection reset, then healed",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note=f"pulled again {pull_s:.2f}s after the heal",
    )
