"""Every workload of spec/bench.md, then its Targets table: Lakeshore against the raw
nats-py baselines measured in the same run (each on a fresh ``lakeshore server``).

Runs ``submit`` (W1-call, W1-map), ``latency`` (W2), ``drain`` and the controller tick
of ``controller_tick``, in this process, one after the other; then prints the table and
the absolute figures behind it. About 2 minutes at the default sizes on 2 cores.

    .venv/bin/python bench/run_all.py [--n 10000] [--latency-n 500] [--quick] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import datetime

import controller_tick
import drain
import latency
import submit
from _report import Row, table
from _workload import CONCURRENCY, DAEMONS

from lakeshore.controller import ControllerSettings, tick

#: ``--quick`` sizes: a check that everything runs, not a measurement.
QUICK_N, QUICK_LATENCY_N, QUICK_TICK_RUNS = 2_000, 200, 10
TICK_RUNS = 50
TICK_SEED = 7


def tick_row(runs: int) -> Row:
    """Median time of one controller tick on ``controller_tick``'s snapshot."""
    snapshot, settings = controller_tick.build(TICK_SEED), ControllerSettings()
    tick(snapshot, settings)  # warm-up
    timings_ms = []
    for _ in range(runs):
        start = time.perf_counter()
        tick(snapshot, settings)
        timings_ms.append((time.perf_counter() - start) * 1e3)
    figure = "controller tick, 1k queues / 1k workers (ms, median)"
    return Row.bound(figure, statistics.median(timings_ms), None, 50.0, "ms", "{:.1f}")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, help=f"invocations of W1 and Drain [10000; quick {QUICK_N}]")
    p.add_argument("--latency-n", type=int, help=f"W2 round trips [500; quick {QUICK_LATENCY_N}]")
    p.add_argument("--concurrency", type=int, default=CONCURRENCY, help="per daemon")
    p.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args()
    n = args.n or (QUICK_N if args.quick else submit.N)
    latency_n = args.latency_n or (QUICK_LATENCY_N if args.quick else latency.N)
    started = datetime.now().astimezone()

    w1 = await submit.measure(n, args.concurrency)
    w2 = await latency.measure(latency_n, args.concurrency)
    dr = await drain.measure(n, args.concurrency)
    tick_ms = tick_row(QUICK_TICK_RUNS if args.quick else TICK_RUNS)

    rows = [*w1.rows(), *w2.rows(), *dr.rows(), tick_ms]
    print(
        f"Lakeshore benchmarks, {started:%Y-%m-%d %H:%M %Z}: N={n:,}, W2 {latency_n} round "
        f"trips, {DAEMONS} daemons x concurrency {args.concurrency}"
    )
    print()
    print(table(rows, markdown=args.markdown))
    print()
    bullet = "- " if args.markdown else "  "
    print("Absolute figures:")
    for line in (*w1.details(), *w2.details(), *dr.details()):
        print(bullet + line)


if __name__ == "__main__":
    asyncio.run(main())
