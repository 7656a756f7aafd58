"""What a history stream that *sources* every queue of a namespace costs as queues are added
(issue 26, Options A/B of ``notes/hot-path-design.md``; ``bench/sourced_history.py``
measured one source).

A namespace's history would source each of its queues' work-queue streams: a queue's
creation is then an update of the history stream's ``sources`` (a meta proposal in a
cluster). This measures, on one bare ``nats-server`` (the pinned binary), with ``K``
queues added one by one (each its work-queue stream, its workers' consumer, then the
history's update with one more source):

- how long each update of the history's sources takes, as the list grows;
- with all ``K`` sourced, a submit's publish acked → an ordered consumer of the history
  has it (sequential, spread over the queues), against the same with one source.

With ``--cluster``, on the 3-node deploy of ``deploy/nats`` (the closed bus, TLS; the
streams R3) instead: each update is then a meta proposal of the whole list.

    .venv/bin/python bench/history_sources.py [--queues 200] [--n 500] [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from nats.js import JetStreamContext
from nats.js.api import StreamConfig, StreamSource, SubjectTransform
from sourced_history import BODY, bare_nats, work_stream, workers

# The 3-node deploy as the HA tests and bench/failover.py start it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import natsauth  # noqa: E402
from nats_cluster import nats_nodes, start_cluster  # noqa: E402

QUEUES = 200
N = 500


def _source(i: int) -> StreamSource:
    return StreamSource(
        name=f"Q{i}", subject_transforms=[SubjectTransform(src=f"q{i}.>", dest=f"hist.q{i}.>")]
    )


@contextlib.asynccontextmanager
async def cluster_nats() -> AsyncIterator[JetStreamContext]:
    """The 3-node deploy on loopback, fresh; the control plane's credentials."""
    # The nodes' own logs (routes coming up, snapshots at shutdown) and nats-py's TLS
    # transport's notice at close say nothing of the figures.
    logging.getLogger("lakeshore.embedded").setLevel(logging.CRITICAL)
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    had_secrets = natsauth.SECRETS_ENV in os.environ
    secrets = natsauth.install()
    try:
        async with _cluster() as js:
            yield js
    finally:
        if not had_secrets:
            shutil.rmtree(secrets.parent, ignore_errors=True)
            del os.environ[natsauth.SECRETS_ENV]


@contextlib.asynccontextmanager
async def _cluster() -> AsyncIterator[JetStreamContext]:
    with tempfile.TemporaryDirectory(prefix="ls-sources-") as tmp:
        async with nats_nodes(Path(tmp)) as factory:
            cluster = await start_cluster(factory, Path(tmp))
            nc = await natsauth.plane_nats(cluster.url, ca_pem=cluster.files.ca.read_text())
            try:
                yield nc.jetstream(timeout=30)
            finally:
                await nc.close()


async def add_queues(js: JetStreamContext, k: int, replicas: int = 1) -> list[float]:
    """Add ``k`` queues and source each into ``HIST``; the seconds of each update."""
    hist = StreamConfig(name="HIST", subjects=["nothing.here"], num_replicas=replicas)
    await js.add_stream(hist)
    sources: list[StreamSource] = []
    took = []
    for i in range(k):
        await work_stream(js, f"Q{i}", f"q{i}.>", replicas)
        await workers(js, f"Q{i}")
        sources.append(_source(i))
        began = time.perf_counter()
        await js.update_stream(
            StreamConfig(name="HIST", subjects=["nothing.here"], sources=sources,
                         num_replicas=replicas)
        )  # fmt: skip
        took.append(time.perf_counter() - began)
    return took


async def lags(js: JetStreamContext, queues: int, n: int) -> list[float]:
    """Seconds from each publish's ack until an ordered consumer of ``HIST`` gets it (one at
    a time, queues in turn)."""
    arrived: asyncio.Queue[float] = asyncio.Queue()

    async def on(msg) -> None:
        await arrived.put(time.perf_counter())

    sub = await js.subscribe("hist.>", stream="HIST", cb=on, ordered_consumer=True)
    try:
        out = []
        for i in range(n):
            q = i % queues
            await js.publish(f"q{q}.x", BODY, headers={"Nats-Msg-Id": f"lag-{q}-{i}"})
            acked = time.perf_counter()
            out.append(max(0.0, await asyncio.wait_for(arrived.get(), 30) - acked))
        return out
    finally:
        await sub.unsubscribe()


def _ms(values: list[float]) -> str:
    s = sorted(values)
    p90 = s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]
    return f"{statistics.median(s) * 1000:.1f} / {p90 * 1000:.1f}"


async def measure(queues: int, n: int, cluster: bool) -> list[str]:
    nats, replicas = (cluster_nats, 3) if cluster else (bare_nats, 1)
    async with nats() as js:
        took = await add_queues(js, queues, replicas)
        many = await lags(js, queues, n)
    async with nats() as js:
        await add_queues(js, 1, replicas)
        one = await lags(js, 1, n)
    where = "the 3-node deploy (R3)" if cluster else "one bare nats-server"
    tenth = max(1, queues // 10)
    return [
        f"A history stream sourcing {queues} work-queue streams, on {where}:",
        "",
        "| figure | p50 / p90 ms |",
        "| --- | ---: |",
        f"| update of its sources, queues 1–{tenth} | {_ms(took[:tenth])} |",
        f"| update of its sources, queues {queues - tenth + 1}–{queues} | {_ms(took[-tenth:])} |",
        f"| publish acked → a reader of the history has it, {queues} sources | {_ms(many)} |",
        f"| publish acked → a reader of the history has it, 1 source | {_ms(one)} |",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=QUEUES)
    parser.add_argument("--n", type=int, default=N)
    parser.add_argument("--cluster", action="store_true", help="the 3-node deploy, R3")
    args = parser.parse_args()
    print("\n".join(asyncio.run(measure(args.queues, args.n, args.cluster))))
