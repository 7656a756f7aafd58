"""A peer daemon's NAK of another daemon's running delivery is harmless.

NATS cannot scope acks to the delivery a daemon holds: every daemon of a queue may publish
on ``$JS.ACK.<stream>.>``, and the subject of another's delivery is easy to guess from the
consumer's sequences. So a peer's NAK makes JetStream deliver the running invocation again
— and the daemon that gets it asks the control plane first (``ls.<ns>.held.<id>``): an
earlier attempt still held by a live daemon is not run a second time, and the running
attempt stays the one whose completion counts.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from nats.js.api import ConsumerInfo
from natsauth import plane_nats
from polling import eventually

from lakeshore.bus import subjects
from lakeshore.daemon import DaemonSettings

from . import running
from .world import NS, WAIT_S, World

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
