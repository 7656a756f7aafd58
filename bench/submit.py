"""W1-call and W1-map of spec/bench.md, with the raw-ack and raw-pipe baselines.

One producer thread submits ``n`` no-ops through the SDK's sync API — ``f.submit(i)`` one
after the other (W1-call) or one ``f.map(range(n))`` (W1-map) — while no daemon pulls;
then 2 daemons start. Each workload runs on a fresh ``lakeshore server``; the baselines
run on a third one. Figures (all per second, ``n`` over):

- submit: the submitting;
- drain: the first run's start → the last run's end (the daemons' own timestamps);
- e2e: submit + drain;
- recorded: the first submit → the API reports ``n`` succeeded.

    .venv/bin/python bench/submit.py [--n 10000] [--concurrency 64]
"""

from __future__ import annotations

from dataclasses import dataclass

import _raw
from _harness import server
from _report import Row, run_script
from _workload import CONCURRENCY, QueueRun, queue_run, submit_each, submit_map

N = 10_000
#: Publishes in flight of the raw-pipe baseline.
PIPE_IN_FLIGHT = 256


@dataclass(frozen=True)
class SubmitFigures:
    call: QueueRun
    map: QueueRun
    ack: _raw.RawRun
    pipe: _raw.RawRun

    def rows(self) -> list[Row]:
        return [
            Row.ratio("W1-call submit/s", self.call.submit_rate, self.ack.submit_rate, 0.5),
            Row.ratio("W1-call e2e/s", self.call.e2e_rate, self.ack.e2e_rate, 0.5),
            Row.ratio("W1-map e2e/s", self.map.e2e_rate, self.pipe.e2e_rate, 0.5),
            Row.bound(
                "recorded after last run ends (s), W1-map",
                self.map.recorded_lag_s,
                None,
                1.0,
                "s",
                "{:.2f}",
            ),
        ]

    def details(self) -> list[str]:
        out = []
        for name, raw in (
            ("raw-ack", self.ack),
            (f"raw-pipe ({PIPE_IN_FLIGHT} in flight)", self.pipe),
        ):
            out.append(
                f"{name}: submit {raw.submit_rate:,.0f}/s, drain {raw.drain_rate:,.0f}/s, "
                f"e2e {raw.e2e_rate:,.0f}/s"
            )
        for name, run in (("W1-call", self.call), ("W1-map", self.map)):
            out.append(
                f"Lakeshore {name}: submit {run.submit_rate:,.0f}/s ({run.submit_s:.2f} s), "
                f"drain {run.drain_rate:,.0f}/s ({run.drain_s:.2f} s), "
                f"e2e {run.e2e_rate:,.0f}/s, recorded {run.recorded_rate:,.0f}/s; "
                f"recorded {run.recorded_lag_s:.2f} s after the last run ended; "
                f"daemons' start-up {run.startup_s:.2f} s"
            )
        return out


async def measure(n: int = N, concurrency: int = CONCURRENCY) -> SubmitFigures:
    async with server() as srv:
        ack = await _raw.queue_run(srv, "RAWACK", n)
        pipe = await _raw.queue_run(srv, "RAWPIPE", n, in_flight=PIPE_IN_FLIGHT)
    call = await queue_run(n, submit_each, concurrency)
    mapped = await queue_run(n, submit_map, concurrency)
    return SubmitFigures(call, mapped, ack, pipe)


if __name__ == "__main__":
    run_script(__doc__, N, CONCURRENCY, measure)
