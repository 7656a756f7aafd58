"""Drain of spec/bench.md: ``n`` pending no-ops, then 2 daemons start; with raw-ack drain.

Lakeshore: ``f.map(range(n))`` through the SDK on a fresh server while no daemon pulls,
then 2 daemons start. runs/s is ``n`` over the first run's start → the last run's end
(the daemons' own timestamps), and over the first run's start → the API reports all
``n`` succeeded. raw-ack, on its own fresh server: ``n`` messages in a WorkQueue stream,
then 2 consumer processes pull and ``ack()`` them; ``n`` over the first receipt → the
last ack.

    .venv/bin/python bench/drain.py [--n 10000] [--concurrency 64]
"""

from __future__ import annotations

from dataclasses import dataclass

import _raw
from _harness import server
from _report import Row, run_script
from _workload import CONCURRENCY, QueueRun, queue_run, submit_map

N = 10_000


@dataclass(frozen=True)
class DrainFigures:
    run: QueueRun
    raw: _raw.RawRun

    def rows(self) -> list[Row]:
        return [Row.ratio("Drain runs/s", self.run.drain_rate, self.raw.drain_rate, 0.3)]

    def details(self) -> list[str]:
        run = self.run
        return [
            f"raw-ack drain: {self.raw.drain_rate:,.0f}/s",
            f"Lakeshore drain: {run.drain_rate:,.0f} runs/s until the last run ended "
            f"({run.drain_s:.2f} s), {run.recorded_drain_rate:,.0f}/s until the API reported "
            f"all recorded ({run.recorded_lag_s:.2f} s later); daemons' start-up "
            f"{run.startup_s:.2f} s",
        ]


async def measure(n: int = N, concurrency: int = CONCURRENCY) -> DrainFigures:
    async with server() as srv:
        raw = await _raw.queue_run(srv, "RAWDRAIN", n)
    return DrainFigures(await queue_run(n, submit_map, concurrency), raw)


if __name__ == "__main__":
    run_script(__doc__, N, CONCURRENCY, measure)
