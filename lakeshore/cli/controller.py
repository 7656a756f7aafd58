"""``lakeshore controller``: what the controller wants, has, and why."""

from __future__ import annotations

import click

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, run
from lakeshore.model import ControllerStatus


def status_table(s: ControllerStatus) -> str:
    """One row per queue and per pool, then the live steal leases."""
    if not s.ticks:
        return "the controller has not ticked yet; try again in a moment"
    rows = output.table(
        ("SCOPE", "NAME", "POLICY", "DESIRED", "ACTUAL", "LAUNCHING", "REASON"),
        (
            (
                u.scope,
                u.name if u.pool is None else f"{u.name} (pool {u.pool})",
                u.policy,
                u.desired,
                u.actual,
                u.launching,
                u.reason if u.error is None else f"{u.reason}; NOT APPLIED: {u.error}",
            )
            for u in s.units
        ),
    )
    if not s.leases:
        return rows + "\n\nsteal leases: (none)"
    leases = output.table(
        ("WORKER", "STEALS FROM", "UNTIL"), ((x.worker, x.queue, x.until) for x in s.leases)
    )
    return f"{rows}\n\nsteal leases: {len(s.leases)}\n{leases}"


@click.group(cls=LakeshoreGroup)
def controller() -> None:
    """The controller: scales daemon fleets by each queue's elasticity, lends idle daemons.

    It ticks every second (the server's tick_s); each decision is also recorded as a
    queue event (`lakeshore queues events NAME --verbose`).
    """


@controller.command("status")
def status() -> None:
    """Per queue and pool: desired and actual managed daemons, launching, and why."""
    run(lambda c: c.controller_status(), status_table)
