"""W2 of spec/bench.md: sequential submit → result round trips, with the raw-W2 baseline.

Lakeshore: 2 daemons, registered, idle and warm; a producer thread calls
``f.submit(i).result()`` one after the other through the SDK's sync API and times each
call. raw-W2, on its own fresh server: ``await js.publish`` of one message, one of 2
consumer processes runs the no-op and answers on core NATS; the producer times publish →
answer. p50 and p99 of ``n`` round trips each, after 20 of warm-up.

    .venv/bin/python bench/latency.py [--n 500] [--concurrency 64]
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import _raw
from _harness import daemons, server, wait_registered
from _report import Row, percentile_ms, run_script
from _workload import CONCURRENCY, DAEMONS, QUEUE, sdk_on

from lakeshore.model import QueueCreate
from lakeshore.sdk import Client, Udf

N = 500
WARMUP = 20


def _round_trips(f: Udf, n: int, warmup: int) -> list[float]:
    out = []
    for i in range(n + warmup):
        start = time.perf_counter()
        value = f.submit(i).result(timeout=30)
        elapsed = time.perf_counter() - start
        if value != i:
            raise RuntimeError(f"noop({i}) answered {value!r}")
        if i >= warmup:
            out.append(elapsed)
    return out


async def round_trips(n: int, concurrency: int = CONCURRENCY) -> list[float]:
    """Lakeshore's ``n`` round trips (seconds) on a fresh server with idle daemons."""
    async with server() as srv, Client(srv.api, srv.token) as client:
        await client.queue_add(QueueCreate(name=QUEUE))
        async with daemons(srv, QUEUE, DAEMONS, concurrency):
            await wait_registered(client, [f"bench-{i}" for i in range(DAEMONS)])
            with sdk_on(srv) as f:
                return await asyncio.to_thread(_round_trips, f, n, WARMUP)


@dataclass(frozen=True)
class LatencyFigures:
    ours: list[float]
    raw: list[float]

    def rows(self) -> list[Row]:
        ours50, ours99 = percentile_ms(self.ours, 50), percentile_ms(self.ours, 99)
        raw50, raw99 = percentile_ms(self.raw, 50), percentile_ms(self.raw, 99)
        return [
            Row.bound("W2 p50 (ms)", ours50, raw50, 2.0, "ms", "{:.2f}"),
            Row.bound("W2 p99 (ms)", ours99, raw99, 5.0, "ms", "{:.2f}"),
        ]

    def details(self) -> list[str]:
        return [
            f"{name}: p50 {percentile_ms(s, 50):.2f} ms, p99 {percentile_ms(s, 99):.2f} ms, "
            f"max {max(s) * 1000:.2f} ms over {len(s)} round trips"
            for name, s in (("raw-W2", self.raw), ("Lakeshore W2", self.ours))
        ]


async def measure(n: int = N, concurrency: int = CONCURRENCY) -> LatencyFigures:
    async with server() as srv:
        raw = await _raw.round_trips(srv, n, WARMUP)
    return LatencyFigures(await round_trips(n, concurrency), raw)


if __name__ == "__main__":
    run_script(__doc__, N, CONCURRENCY, measure)
