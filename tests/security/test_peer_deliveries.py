"""A peer daemon's NAK of another daemon's running delivery is harmless.

NATS cannot scope acks to the delivery a daemon holds: every daemon of a queue may publish
on ``$JS.ACK.<stream>.>``, and the subject of another's delivery is easy to guess from the
consumer's sequences. So a peer's NAK makes JetStream deliver the running invocation again
— and the daemon that gets it asks the control plane first (``ls.<ns>.held.<id>``): an
earlier attempt still held by a live daemon is not run a second time, and the running
attempt stays the one whose completion counts.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import aiohttp
import msgspec
import pytest
from nats.js.api import ConsumerInfo
from natsauth import plane_nats
from polling import eventually

from lakeshore.actors.workers import Report
from lakeshore.bus import subjects
from lakeshore.daemon import DaemonSettings
from lakeshore.model import ClaimMark
from lakeshore.services.jobs import let_go

from . import running
from .world import NS, WAIT_S, Client, Q, World

STARTS = "import pathlib, sys, time; p = pathlib.Path(sys.argv[1]); "
STARTS += "p.write_text(p.read_text() + 'started\\n' if p.exists() else 'started\\n'); "
STARTS += "time.sleep(60)"


async def _consumer(world: World) -> ConsumerInfo:
    nc = await plane_nats(world.url)
    try:
        return await nc.jetstream().consumer_info(subjects.queue_stream(NS, "busy"), "p0")
    finally:
        await nc.close()


async def test_a_peers_nak_of_a_running_delivery_does_not_run_it_twice(
    world: World, tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="lakeshore.daemon")
    starts = tmp_path / "starts"
    command = [sys.executable, "-c", STARTS, str(starts)]
    # Daemon a's two slots are taken (the world's busy job and this one), so the delivery
    # a peer NAKs goes to daemon b.
    job = await running.submit(world.api, "busy", {"command": command})
    await running.reaches(world.api, job, "running")
    await eventually(starts.exists, until=bool, timeout_s=WAIT_S, what="the job started")
    access = await world.join(world.peer_token, NS)
    peer = await world.as_daemon(access, "peer daemon")
    b_access = await world.join(world.peer_token, NS)
    b = DaemonSettings(
        access=b_access, name="second", queues=["busy"], concurrency=1, heartbeat_s=0.2,
        drain_timeout_s=0.5,
    )  # fmt: skip
    async with running.daemon(b):
        info = await _consumer(world)
        sseq, dseq = info.delivered.stream_seq, info.delivered.consumer_seq
        stream = subjects.queue_stream(NS, "busy")
        await peer.nc.publish(f"$JS.ACK.{stream}.p0.1.{sseq}.{dseq}.0.0", b"-NAK")
        await peer.nc.flush()

        def seen() -> tuple[bool, str]:
            handed_back = any("still held by" in r.getMessage() for r in caplog.records)
            return handed_back, starts.read_text()

        await eventually(
            seen, until=lambda s: s[0] or s[1].count("started") > 1, timeout_s=WAIT_S,
            what="the redelivery handed back to its holder (or run a second time)",
        )  # fmt: skip
        assert (await _consumer(world)).num_redelivered >= 1
        assert seen() == (True, "started\n")
        shown = (await world.api.get(f"/v1/namespaces/{NS}/jobs/{job}"))[1]
        assert (shown["state"], shown["worker"], shown["attempt"]) == (
            "running",
            world.a.worker.id,
            1,
        )


#: How long the runs a peer harasses last: long past any count of hand-backs.
RUN_S = 180.0
#: The peer's NAKs: this many, this far apart (a second execution once came after 13 s).
BURST, BURST_GAP_S = 40, 0.4
CHATTY = logging.getLogger("lakeshore.daemon.claimer")


async def _member(world: World, name: str, queue: str, concurrency: int) -> DaemonSettings:
    """A daemon of the victim's namespace pulling from ``queue``."""
    access = await world.join(world.peer_token, NS)
    return DaemonSettings(
        access=access, name=name, queues=[queue], concurrency=concurrency, heartbeat_s=0.2,
        drain_timeout_s=0.5,
    )  # fmt: skip


async def _queue_and_peer(world: World, caplog, queue: str) -> Client:
    """A new queue of the victim's namespace and a peer daemon's connection to harass it
    with; the claimer's hand-backs are logged (the tests read them)."""
    caplog.set_level(logging.INFO, logger=CHATTY.name)
    assert (await world.api.post(Q, {"name": queue}))[0] == 201
    return await world.as_daemon(await world.join(world.peer_token, NS), "peer daemon")


async def _peer_reply(world: World, peer: Client, queue: str, job: str, verb: bytes) -> None:
    """A peer's ``verb`` (``-NAK``, ``+ACK``, ``+TERM``) on the delivery of ``job``: its
    stream sequence, and a consumer sequence the consumer has delivered (what JetStream
    checks)."""
    attempt = (await world.api.get(f"/v1/namespaces/{NS}/jobs/{job}"))[1]["attempts"][0]
    stream = subjects.queue_stream(NS, queue)
    nc = await plane_nats(world.url)
    try:
        dseq = (await nc.jetstream().consumer_info(stream, "p0")).delivered.consumer_seq
    finally:
        await nc.close()
    await peer.nc.publish(f"$JS.ACK.{stream}.p0.1.{attempt['seq']}.{dseq}.0.0", verb)
    await peer.nc.flush()


@pytest.mark.timeout(RUN_S + 120)
async def test_a_peers_nak_burst_ack_and_term_leave_one_execution_whose_outcome_is_the_holders(
    world: World, tmp_path: Path, caplog
) -> None:
    peer = await _queue_and_peer(world, caplog, "pair")
    holder = await _member(world, "holder", "pair", concurrency=2)
    other = await _member(world, "other", "pair", concurrency=1)
    starts = {name: tmp_path / name for name in ("nakked", "acked", "termed")}
    script = STARTS.replace("time.sleep(60)", f"time.sleep({RUN_S}); print('done')")

    async def shown(job: str) -> dict:
        return (await world.api.get(f"/v1/namespaces/{NS}/jobs/{job}"))[1]

    async def reply(job: str, verb: bytes) -> None:
        await _peer_reply(world, peer, "pair", job, verb)

    def handed_back() -> int:
        return sum("still held by" in r.getMessage() for r in caplog.records)

    async with running.daemon(holder) as h:
        jobs = {}
        for name in ("nakked", "acked"):
            command = [sys.executable, "-c", script, str(starts[name])]
            jobs[name] = await running.submit(world.api, "pair", {"command": command})
            await running.reaches(world.api, jobs[name], "running")
        async with running.daemon(other):
            # 40 NAKs of a running delivery: each redelivers it at once to the idle daemon,
            # which asks who holds it and hands it back (before, it ran it after 12).
            for _ in range(BURST):
                await reply(jobs["nakked"], b"-NAK")
                await asyncio.sleep(BURST_GAP_S)  # the burst's pace, not a wait on a state
            await eventually(
                handed_back, until=lambda n: n > 12, timeout_s=WAIT_S,
                what="the NAKed delivery handed back more than 12 times",
            )  # fmt: skip
            # An ack removes the message from the work-queue stream; the run goes on.
            await reply(jobs["acked"], b"+ACK")
            for name, job in jobs.items():
                await running.reaches(world.api, job, "succeeded", wait_s=RUN_S + 60)
                assert starts[name].read_text() == "started\n", name
                row = await shown(job)
                assert row["worker"] == h.worker.id, name
                assert [(a["worker"], a["outcome"]) for a in row["attempts"]] == [
                    (h.worker.id, "succeeded")
                ], (name, row["attempts"])
            # A term of a running delivery: the same — the holder's completion is the outcome.
            command = [sys.executable, "-c", STARTS.replace("60", "5"), str(starts["termed"])]
            termed = await running.submit(world.api, "pair", {"command": command})
            await eventually(starts["termed"].exists, until=bool, timeout_s=WAIT_S,
                             what="the termed job started")  # fmt: skip
            await reply(termed, b"+TERM")
            await running.reaches(world.api, termed, "succeeded", wait_s=WAIT_S + 5)
            assert starts["termed"].read_text() == "started\n"


def test_a_holder_lets_a_run_go_only_by_a_heartbeat_sent_after_its_claim_without_it() -> None:
    """ "After" is the claim's mark in its daemon process's order, never a clock: a daemon
    10 minutes ahead has its claim times moved onto the server's clock in the history, while
    its heartbeats keep its own — a comparison of the two took a report sent *before* the
    claim for one sent after it."""
    claim = ClaimMark("boot-1", 7)
    assert let_go(Report(ClaimMark("boot-1", 7), frozenset()), "j", claim)  # with or after it
    assert let_go(Report(ClaimMark("boot-1", 9), frozenset()), "j", claim)
    assert not let_go(Report(ClaimMark("boot-1", 9), frozenset({"j"})), "j", claim)  # runs it
    assert not let_go(Report(ClaimMark("boot-1", 6), frozenset()), "j", claim)  # before it
    assert not let_go(Report(None, frozenset()), "j", claim)  # no claim taken yet
    # The same worker started again (a new process): the old process's run is gone with it.
    assert let_go(Report(ClaimMark("boot-2", 1), frozenset()), "j", claim)
    assert not let_go(None, "j", claim)  # a new leader has heard nothing yet
    assert not let_go(Report(ClaimMark("boot-1", 9), frozenset()), "j", None)  # not recorded


async def _handed_back_by_its_own_daemon(caplog) -> None:
    await eventually(
        lambda: any("it runs here" in r.getMessage() for r in caplog.records),
        until=bool, timeout_s=WAIT_S, what="the redelivery handed back by its own daemon",
    )  # fmt: skip


async def test_a_peers_nak_that_brings_the_run_back_to_its_own_daemon_is_handed_back(
    world: World, tmp_path: Path, caplog
) -> None:
    peer = await _queue_and_peer(world, caplog, "solo")
    solo = await _member(world, "solo", "solo", concurrency=2)
    starts = tmp_path / "starts"
    async with running.daemon(solo):
        command = [sys.executable, "-c", STARTS, str(starts)]
        job = await running.submit(world.api, "solo", {"command": command})
        await running.reaches(world.api, job, "running")
        await eventually(starts.exists, until=bool, timeout_s=WAIT_S, what="the job started")
        # Its daemon has a free slot: the redelivery comes back to it, which runs it already.
        await _peer_reply(world, peer, "solo", job, b"-NAK")
        await _handed_back_by_its_own_daemon(caplog)
        assert starts.read_text() == "started\n"


NUMBERED = """import os, pathlib, sys, time
seen, flag = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
n = os.environ["LAKESHORE_ATTEMPT"]
seen.write_text((seen.read_text() if seen.exists() else "") + n + "\\n")
print("attempt", n, flush=True)
if n == "1":
    while not flag.exists():
        time.sleep(0.05)
    sys.exit(1)
"""


async def _log_text(world: World, job: str, attempt: int) -> str:
    headers = {"Authorization": f"Bearer {world.api.token}"}
    url = f"{world.api.base}/v1/namespaces/{NS}/jobs/{job}/logs"
    async with aiohttp.ClientSession() as http, asyncio.timeout(WAIT_S):
        async with http.get(url, params={"attempt": str(attempt)}, headers=headers) as r:
            assert r.status == 200, await r.text()
            lines = [msgspec.json.decode(line) async for line in r.content if line.strip()]
    return "".join(x["text"] for x in lines if x["kind"] == "chunk")


async def test_hand_backs_do_not_raise_the_attempt_number_nor_move_its_log(
    world: World, tmp_path: Path, caplog
) -> None:
    """A peer's NAK raises the delivery count of a running job (its redelivery is handed
    back); the retry after its failure is still attempt 2 — ``LAKESHORE_ATTEMPT``, the
    attempt ``jobs show`` lists, and the log ``?attempt=2`` reads."""
    peer = await _queue_and_peer(world, caplog, "numbered")
    solo = await _member(world, "numbered", "numbered", concurrency=2)
    seen, flag = tmp_path / "seen", tmp_path / "flag"
    async with running.daemon(solo):
        command = [sys.executable, "-c", NUMBERED, str(seen), str(flag)]
        job = await running.submit(world.api, "numbered", {"command": command, "max_attempts": 2})
        await eventually(seen.exists, until=bool, timeout_s=WAIT_S, what="attempt 1 started")
        await _peer_reply(world, peer, "numbered", job, b"-NAK")
        await _handed_back_by_its_own_daemon(caplog)
        flag.touch()  # attempt 1 fails now; its retry runs
        await running.reaches(world.api, job, "succeeded", wait_s=WAIT_S + 10)
    assert seen.read_text() == "1\n2\n"
    shown = (await world.api.get(f"/v1/namespaces/{NS}/jobs/{job}"))[1]
    numbered = [(a["attempt"], a["epoch"], a["outcome"]) for a in shown["attempts"]]
    assert [(n, o) for n, _, o in numbered] == [(1, "retrying"), (2, "succeeded")], numbered
    assert numbered[1][1] >= 3  # the delivery count: the hand-back raised it
    assert shown["attempt"] == 2
    assert await _log_text(world, job, 1) == "attempt 1\n"
    assert await _log_text(world, job, 2) == "attempt 2\n"
