"""Where one W2 round trip's time goes: bench/latency.py's round trips, each cut into legs.

Lakeshore only (2 daemons, registered, idle and warm; ``f.submit(i).result()`` one after the
other through the SDK's sync API, after 20 of warm-up). Each round trip is cut by the SDK's
clock (before the submit, when it returned, when the result came) and by the daemons' own
times of the job's attempt (``claimed_at``: its daemon took the delivery; ``started_at``:
the run began, once the ``claimed`` event was stored; ``ended_at``: the outcome, after the
result put). Every process is on this machine, so the clocks are one. Prints the p50 and
p90 of each leg, in ms::

    .venv/bin/python bench/w2_budget.py [--n 300] [--isolation process|inline]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import _workload
from _harness import daemons, server, wait_registered
from _workload import CONCURRENCY, DAEMONS, QUEUE, sdk_on
from latency import WARMUP

from lakeshore.model import QueueCreate
from lakeshore.sdk import Client, Udf

LEGS = (
    "submit (SDK -> gateway -> queue actor -> work publish -> submitted events -> 202)",
    "submit answered -> the daemon holds the claim (nudge, pull)",
    "claimed -> started (the claimed event stored before the run)",
    "started -> ended (the run, the result put)",
    "ended -> result at the SDK (the outcome's event stored, fenced, answered)",
    "total",
)


def _round_trips(f: Udf, n: int) -> list[tuple[str, float, float, float]]:
    """``(job id, before the submit, submit returned, result came)`` of each timed trip."""
    out = []
    for i in range(n + WARMUP):
        before = time.time()
        handle = f.submit(i)
        submitted = time.time()
        value = handle.result(timeout=30)
        answered = time.time()
        if value != i:
            raise RuntimeError(f"noop({i}) answered {value!r}")
        if i >= WARMUP:
            out.append((handle.id, before, submitted, answered))
    return out


async def measure(n: int) -> dict[str, list[float]]:
    """Each leg's durations (ms) over ``n`` round trips on a fresh server."""
    legs: dict[str, list[float]] = {leg: [] for leg in LEGS}
    async with server() as srv, Client(srv.api, srv.token) as client:
        await client.queue_add(QueueCreate(name=QUEUE))
        async with daemons(srv, QUEUE, DAEMONS, CONCURRENCY):
            await wait_registered(client, [f"bench-{i}" for i in range(DAEMONS)])
            with sdk_on(srv) as f:
                trips = await asyncio.to_thread(_round_trips, f, n)
            for job_id, before, submitted, answered in trips:
                attempt = (await client.job_show(job_id)).attempts[-1]
                times = (attempt.claimed_at, attempt.started_at, attempt.ended_at)
                if None in times:
                    raise RuntimeError(f"job {job_id}'s attempt lacks a time: {attempt}")
                claimed, started, ended = (t.timestamp() for t in times)  # type: ignore[union-attr]
                marks = (before, submitted, claimed, started, ended, answered)
                for leg, (a, b) in zip(LEGS, zip(marks, marks[1:], strict=False), strict=False):
                    legs[leg].append((b - a) * 1000)
                legs["total"].append((answered - before) * 1000)
    return legs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=300, help="timed round trips [300]")
    p.add_argument("--isolation", default=_workload.ISOLATION, choices=("process", "inline"))
    args = p.parse_args()
    _workload.ISOLATION = args.isolation
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    legs = asyncio.run(measure(args.n))
    print(f"W2 budget, {started}: {args.n} round trips, isolation {args.isolation}")
    print("| leg | p50 ms | p90 ms |")
    print("| --- | ---: | ---: |")
    for leg, values in legs.items():
        values.sort()
        p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
        print(f"| {leg} | {statistics.median(values):.2f} | {p90:.2f} |")


if __name__ == "__main__":
    main()
