"""``lakeshore stats QUEUE``: a queue's throughput, waits and failures per interval."""

from __future__ import annotations

import click

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreCommand, run
from lakeshore.cli.params import DURATION, QUEUE_NAME
from lakeshore.model.history import QueueHistory

HEADERS = ("TIME", "SUBMITTED", "STARTED", "SUCCEEDED", "FAILED", "WAIT_P50", "WAIT_P95")


def history_table(h: QueueHistory) -> str:
    """One row per interval, oldest first (times in UTC)."""
    rows = [
        (p.ts, p.submitted, p.started, p.succeeded, p.failed, output.duration(p.wait_p50_s),
         output.duration(p.wait_p95_s))
        for p in h.points
    ]  # fmt: skip
    return output.table(HEADERS, rows)


@click.command("stats", cls=LakeshoreCommand)
@click.argument("queue", type=QUEUE_NAME)
@click.option("--since", type=DURATION, default="1h", show_default=True, help="How far back.")
@click.option(
    "--every", type=DURATION, default="1m", show_default=True, help="Width of each interval."
)
def stats(queue: str, since: str, every: str) -> None:
    """Show a queue's submitted, started, succeeded and failed counts and wait p50/p95
    per interval (at most 1000 intervals; durations like 30s, 5m, 1h, 2d)."""
    run(lambda c: c.queue_history(queue, since, every), history_table)
