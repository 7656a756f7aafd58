"""Throughput: 10,000 no-op invocations end to end, Lakeshore against raw nats-py JetStream.

Lakeshore: one batch submit through the SDK, 2 daemons (`lakeshore daemon run`), timed
until the control plane has recorded all of them ``succeeded``.
Raw: the same count published with windows of concurrent ``js.publish`` to a WorkQueue
stream, consumed by 2 worker processes with ``fetch(100)`` + ``ack``, timed until all are
acknowledged. Both run in this process's session on the same machine; the ratio is what
matters (target ≥ 0.5).

    .venv/bin/python bench/throughput.py [--n 10000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time

import nats
from _harness import daemons, server, wait_registered
from nats.js.api import RetentionPolicy, StreamConfig

from lakeshore.model import InvocationSubmit, QueueCreate
from lakeshore.sdk import Client
from lakeshore.security import serverauth
from lakeshore.security.natsd import SECRETS_FILE


async def lakeshore_rate(n: int, concurrency: int) -> float:
    async with server() as srv, Client(srv.api, srv.token) as client:
        await client.queue_add(QueueCreate(name="bench"))
        async with daemons(srv, "bench", 2, concurrency):
            await wait_registered(client, ["bench-0", "bench-1"])
            batch = [InvocationSubmit(fn="noop:noop", args=[i]) for i in range(n)]
            start = time.perf_counter()
            await client.submit("bench", batch)
            while (await client.queue_stats("bench")).succeeded < n:
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - start
    return n / elapsed


def _raw_worker(url: str, seed: str, n_total: int, counter, ready) -> None:
    async def run() -> None:
        nc = await nats.connect(url, nkeys_seed_str=seed)
        sub = await nc.jetstream().pull_subscribe_bind("w", stream="RAW")
        ready.set()
        while counter.value < n_total:
            try:
                msgs = await sub.fetch(100, timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                await m.ack()
            with counter.get_lock():
                counter.value += len(msgs)
        await nc.flush()
        await nc.close()

    asyncio.run(run())


async def raw_rate(n: int) -> float:
    async with server() as srv:
        nc = await srv.raw_nats()
        seed = serverauth.load(srv.data_dir / SECRETS_FILE).plane_seed
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(name="RAW", subjects=["raw.>"], retention=RetentionPolicy.WORK_QUEUE)
        )
        await js.add_consumer("RAW", durable_name="w", ack_wait=60, max_ack_pending=20_000)
        ctx = mp.get_context("spawn")
        counter, ready = ctx.Value("i", 0), [ctx.Event(), ctx.Event()]
        workers = [
            ctx.Process(target=_raw_worker, args=(srv.nats_url, seed, n, counter, r)) for r in ready
        ]
        for w in workers:
            w.start()
        # Time the work, not the start-up of the worker processes.
        while not all(r.is_set() for r in ready):
            await asyncio.sleep(0.01)
        start = time.perf_counter()
        for i in range(0, n, 500):
            await asyncio.gather(
                *(
                    js.publish("raw.x", b"%d" % j, headers={"Nats-Msg-Id": str(j)})
                    for j in range(i, min(n, i + 500))
                )
            )
        while counter.value < n:
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - start
        for w in workers:
            w.join(10)
        await nc.close()
    return n / elapsed


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=64)
    args = p.parse_args()
    raw = await raw_rate(args.n)
    ours = await lakeshore_rate(args.n, args.concurrency)
    print(f"raw nats-py JetStream: {raw:8.0f} invocations/s")
    print(f"lakeshore end to end:  {ours:8.0f} invocations/s")
    print(f"ratio: {ours / raw:.2f} (target >= 0.5)")


if __name__ == "__main__":
    asyncio.run(main())
