"""What a process per run costs the machine, not only the clock: the CPU time and the
context switches of the whole system (server, embedded NATS, daemons, worker processes) for
one Drain of ``--n`` no-ops, once per isolation, same run.

Each Drain is ``bench/drain.py``'s (a fresh ``lakeshore server``, 2 daemons x concurrency
64, ``f.map`` while no daemon pulls). Every process it starts is a descendant of this one
and is waited for, so ``getrusage(RUSAGE_CHILDREN)`` before and after holds all of it: user
+ system CPU seconds, voluntary context switches (a process blocked: a read with nothing to
read) and involuntary ones (it was preempted). Per run = the difference over ``--n``; the
set-up (server start, the submit, the daemons' start) is the same for both isolations, so
the difference between them is the runs'.

Run::

    .venv/bin/python bench/isolation_cost.py [--n 10000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from dataclasses import dataclass

import _workload
from _workload import queue_run, submit_map


@dataclass(frozen=True)
class Cost:
    isolation: str
    drain_rate: float
    cpu_s: float
    voluntary: int
    involuntary: int


def _children() -> tuple[float, int, int]:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw, r.ru_nivcsw


def measure(isolation: str, n: int) -> Cost:
    _workload.ISOLATION = isolation
    cpu0, vol0, inv0 = _children()
    run = asyncio.run(queue_run(n, submit_map))
    cpu1, vol1, inv1 = _children()
    return Cost(isolation, run.drain_rate, cpu1 - cpu0, vol1 - vol0, inv1 - inv0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000, help="no-ops per Drain [10000]")
    p.add_argument("--rounds", type=int, default=2, help="Drains per isolation, interleaved")
    args = p.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    costs = [measure(iso, args.n) for _ in range(args.rounds) for iso in ("inline", "process")]
    print(f"Isolation cost, {started}: Drain N={args.n:,}, whole system, per round")
    print("| isolation | drain runs/s | CPU s | CPU ms / run | vol. cs / run | invol. cs / run |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for c in costs:
        print(
            f"| {c.isolation} | {c.drain_rate:,.0f} | {c.cpu_s:.1f} | "
            f"{1000 * c.cpu_s / args.n:.2f} | {c.voluntary / args.n:.1f} | "
            f"{c.involuntary / args.n:.1f} |"
        )


if __name__ == "__main__":
    main()
