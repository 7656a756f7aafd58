"""``lakeshore controller``: what the controller wants, has, and why."""

from __future__ import annotations

import click

from lakeshore.cli import output, watch
from lakeshore.cli.context import LakeshoreGroup
from lakeshore.model import ControllerStatus, UnitStatus


def status_table(s: ControllerStatus) -> str:
    """One row per queue and per pool, then the live steal leases.

    DESIRED, ACTUAL and LAUNCHING count managed daemons (the controller's own). When more
    daemons serve the unit than the managed ones (hand-launched daemons), ACTUAL says so:
    ``0 (4 total)``.
    """
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
                _actual(u),
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


def _actual(u: UnitStatus) -> str:
    """The managed daemons up, and every daemon up when hand-launched ones add to them."""
    return str(u.actual) if u.total <= u.actual else f"{u.actual} ({u.total} total)"


@click.group(cls=LakeshoreGroup)
def controller() -> None:
    """The controller: scales daemon fleets by each queue's elasticity, lends idle daemons.

    It ticks every second (the server's tick_s); each decision is also recorded as a
    queue event (`lakeshore queues events NAME --verbose`).
    """


@controller.command("status")
@watch.option
def status() -> None:
    """Per queue and pool: desired and actual managed daemons, launching, and why.

    ACTUAL counts the controller's managed daemons up; `0 (4 total)` means 4 daemons serve
    the queue (or a member of the pool), none of them managed (launched by hand).
    """
    watch.run(lambda c: c.controller_status(), status_table)
