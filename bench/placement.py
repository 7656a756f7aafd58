"""Placement cost (spec/resources.md, issue 25): the claim rate with ``n`` pending mixed
requests on 4 daemons of 4 GPUs each, against the same ``n`` asking for nothing, same run.

Each run is a no-op function. ``mixed``: GPU requests of 0–4 drawn uniformly (seed fixed),
no type; ``none``: no request (one CPU). Daemons declare their GPUs with ``--gpus 4`` (no
GPU here) and run 4 at a time (``--concurrency 4``), so ``none`` is bounded by the slots
and ``mixed`` by the GPUs as well: the figure is what the fit check, the holds and the
device sets cost against the same slots. runs/s is ``n`` over the first run's start → the
last run's end (the daemons' own timestamps).

    .venv/bin/python bench/placement.py [--n 1000]
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from _harness import daemons, server
from _report import Row, run_script
from _workload import QUEUE, run_span, wait_recorded

from lakeshore.model import InvocationSubmit, QueueCreate, Resources
from lakeshore.sdk import Client

N = 1000
DAEMONS = 4
SLOTS = 4
GPUS = "4"


@dataclass(frozen=True)
class Drained:
    n: int
    seconds: float
    held_gpus: int

    @property
    def rate(self) -> float:
        return self.n / self.seconds


@dataclass(frozen=True)
class PlacementFigures:
    mixed: Drained
    none: Drained

    def rows(self) -> list[Row]:
        return [Row.ratio("Placement: mixed runs/s", self.mixed.rate, self.none.rate, 0.0)]

    def details(self) -> list[str]:
        capacity = DAEMONS * int(GPUS)
        return [
            f"{self.none.n} runs asking nothing on {DAEMONS} daemons x {SLOTS} slots: "
            f"{self.none.rate:,.0f} runs/s ({self.none.seconds:.2f} s)",
            f"{self.mixed.n} runs asking 0-4 GPUs ({self.mixed.held_gpus} GPU-runs in all) on "
            f"{DAEMONS} daemons x {GPUS} GPUs ({capacity} GPUs): {self.mixed.rate:,.0f} runs/s "
            f"({self.mixed.seconds:.2f} s)",
        ]


async def drain(n: int, requests: list[Resources | None]) -> Drained:
    async with server() as srv, Client(srv.api, srv.token) as client:
        await client.queue_add(QueueCreate(name=QUEUE))
        specs = [InvocationSubmit(fn="noop:noop", resources=r) for r in requests]
        for i in range(0, n, 500):
            await client.submit(QUEUE, specs[i : i + 500])
        async with daemons(srv, QUEUE, DAEMONS, SLOTS, ("--gpus", GPUS)):
            await wait_recorded(client, n)
        first, last = await run_span(client, n)
    return Drained(n, last - first, sum(r.gpus for r in requests if r is not None))


async def measure(n: int = N, _concurrency: int = SLOTS) -> PlacementFigures:
    rng = random.Random(25)
    mixed = [Resources(gpus=rng.randint(0, 4)) for _ in range(n)]
    return PlacementFigures(mixed=await drain(n, mixed), none=await drain(n, [None] * n))


if __name__ == "__main__":
    run_script(__doc__, N, SLOTS, measure)
