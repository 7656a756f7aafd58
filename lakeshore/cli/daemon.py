"""``lakeshore daemon``: the workers that pull from queues, and their membership."""

from __future__ import annotations

import click

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, run


@click.group(cls=LakeshoreGroup)
def daemon() -> None:
    """Daemons: the workers that pull invocations from queues.

    Every DAEMON argument accepts the worker's id or its name.
    """


@daemon.command("list")
def list_() -> None:
    """List daemons with their queues and status."""
    run(lambda c: c.workers_ls(), output.workers)


@daemon.command("show")
@click.argument("ref", metavar="DAEMON")
def show(ref: str) -> None:
    """Show one daemon.

    `queues: []` means the daemon pulls from the default queue.
    """
    run(lambda c: c.worker_show(ref), output.worker)


@daemon.command("update")
@click.argument("ref", metavar="DAEMON")
@click.option("--add-queue", "add", multiple=True, metavar="Q", help="Start pulling from Q.")
@click.option("--remove-queue", "remove", multiple=True, metavar="Q", help="Stop pulling from Q.")
def update(ref: str, add: tuple[str, ...], remove: tuple[str, ...]) -> None:
    """Change a running daemon's queues.

    The daemon picks the change up on its next poll; no relaunch is needed.

    Both options are repeatable. Removing every queue puts the daemon on the default
    queue.
    """
    if not add and not remove:
        raise click.UsageError("nothing to change: give --add-queue and/or --remove-queue")
    run(lambda c: c.worker_queues(ref, add=list(add), remove=list(remove)), output.worker)
