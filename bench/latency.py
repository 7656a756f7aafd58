"""Latency: sequential submit → result round trips through the SDK, one idle daemon.

Each round trip is `client.submit(...)` of one no-op invocation followed by the result
route's long-poll until it has finished; p50 and p99 over the runs (target on loopback:
p50 <= 2 ms, p99 <= 5 ms). The raw baseline in the same run is one nats-py JetStream
publish + a worker's fetch/ack + a reply on core NATS, measured the same way.

    .venv/bin/python bench/latency.py [--n 500]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import nats
from _harness import daemons, server, wait_registered
from nats.js.api import RetentionPolicy, StreamConfig

from lakeshore.model import InvocationSubmit, QueueCreate, Result
from lakeshore.sdk import Client


def _pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1] * 1000


async def lakeshore_latencies(n: int) -> list[float]:
    async with server() as srv, Client(srv.api, srv.token) as client:
        await client.queue_add(QueueCreate(name="lat"))
        async with daemons(srv, "lat", 1, 1):
            await wait_registered(client, ["bench-0"])
            out = []
            for i in range(n + 20):
                start = time.perf_counter()
                answer = await client.submit("lat", InvocationSubmit(fn="noop:noop", args=[i]))
                result = await client.job_result(answer.ids[0], wait_s=10)
                elapsed = time.perf_counter() - start
                assert isinstance(result, Result) and result.ok, result
                if i >= 20:  # warm-up
                    out.append(elapsed)
    return out


async def raw_latencies(n: int) -> list[float]:
    async with server() as srv:
        nc = await srv.raw_nats()
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(name="RAWLAT", subjects=["rawlat.>"], retention=RetentionPolicy.WORK_QUEUE)
        )
        sub = await js.pull_subscribe("rawlat.x", durable="w", stream="RAWLAT")
        done = await nc.subscribe("rawlat.done")

        async def worker() -> None:
            while True:
                try:
                    msgs = await sub.fetch(1, timeout=5)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    await m.ack_sync()
                    await nc.publish("rawlat.done", m.data)

        task = asyncio.create_task(worker())
        out = []
        for i in range(n + 20):
            start = time.perf_counter()
            await js.publish("rawlat.x", b"%d" % i)
            await done.next_msg(timeout=10)
            if i >= 20:
                out.append(time.perf_counter() - start)
        task.cancel()
        await nc.close()
    return out


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=500)
    args = p.parse_args()
    raw = await raw_latencies(args.n)
    ours = await lakeshore_latencies(args.n)
    print(
        f"raw nats-py JetStream round trip: p50 {_pct(raw, 50):.2f} ms, p99 {_pct(raw, 99):.2f} ms"
    )
    print(
        f"lakeshore submit -> result:       p50 {_pct(ours, 50):.2f} ms, "
        f"p99 {_pct(ours, 99):.2f} ms (target p50 <= 2, p99 <= 5)"
    )


if __name__ == "__main__":
    asyncio.run(main())
