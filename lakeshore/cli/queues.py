"""``lakeshore queues``: create, inspect, patch and retire queues (spec/queues.md).

The group's two irregular verbs, ``ls`` and ``rm``, are the spec's; there are no
``list``/``remove`` aliases.
"""

from __future__ import annotations

from typing import Any

import click

from lakeshore.cli import output, watch
from lakeshore.cli.context import LakeshoreGroup, run
from lakeshore.cli.params import QUEUE_NAME
from lakeshore.model import ElasticityKind, OnFull, QueueCreate, QueueKind, QueueState

_ON_FULL = click.Choice([s.value for s in OnFull])


#: ``--max-depth none``: remove the bound (sent as ``"max_depth": null``).
UNBOUNDED = "none"


class _DepthOrNone(click.ParamType):
    """A positive integer, or ``none`` (converted to :data:`UNBOUNDED`)."""

    name = "N|none"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | str:
        if str(value).lower() == UNBOUNDED:
            return UNBOUNDED
        return click.IntRange(min=1).convert(value, param, ctx)


#: Flags that are fields of the elasticity object; the server merges them into the rest.
_SCALING_OPTIONS = [
    click.option("--min", type=click.IntRange(min=0), help="Fewest managed daemons."),
    click.option("--max", type=click.IntRange(min=0), help="Most managed daemons."),
    click.option("--provider", metavar="P", help="Provider the controller launches on."),
    click.option(
        "--target-pending",
        type=click.IntRange(min=1),
        help="Pending + running invocations one daemon is sized for.",
    ),
]


def _scaling_options(f: Any) -> Any:
    for option in reversed(_SCALING_OPTIONS):
        f = option(f)
    return f


def _elasticity(**fields: Any) -> dict[str, Any]:
    """The partial elasticity object of the scaling flags that were given."""
    return {k: v for k, v in fields.items() if v is not None}


@click.group(cls=LakeshoreGroup)
def queues() -> None:
    """Queues: named pipes of work that daemons pull from.

    A daemon pulls from the queues listed in its `queues` field; an empty list is the
    `default` queue, which every namespace has without creating it.
    """


@queues.command("add")
@click.argument("name", type=QUEUE_NAME)
@click.option(
    "--kind",
    type=click.Choice([k.value for k in QueueKind]),
    help="fifo (default) or priority (levels 0-9, highest first). Fixed once created.",
)
@click.option(
    "--elasticity",
    "elasticity_kind",
    type=click.Choice([k.value for k in ElasticityKind]),
    help="How the controller sizes the queue's fleet (default fixed).",
)
@_scaling_options
@click.option(
    "--max-depth", type=click.IntRange(min=1), help="Most unfinished invocations (default none)."
)
@click.option("--on-full", type=_ON_FULL, help="What a submit to a full queue does.")
@click.option("--description", metavar="D", help="Free text shown by ls and show.")
def add(
    name: str,
    kind: str | None,
    elasticity_kind: str | None,
    max_depth: int | None,
    on_full: str | None,
    description: str | None,
    **scaling: Any,
) -> None:
    """Create a queue.

    NAME: lowercase letters, digits and '-', starting with a letter or digit.
    """
    elasticity = _elasticity(kind=elasticity_kind, **scaling)
    given = {
        "kind": kind,
        "max_depth": max_depth,
        "on_full": on_full,
        "description": description,
        "elasticity": elasticity or None,
    }
    body = QueueCreate(name=name, **{k: v for k, v in given.items() if v is not None})
    run(lambda c: c.queue_add(body), output.queue)


@queues.command("ls")
@click.option(
    "--state", type=click.Choice([s.value for s in QueueState]), help="Only queues in this state."
)
@watch.option
def ls(state: str | None) -> None:
    """List queues of every namespace in the org.

    Each row names its namespace. The `default` queue is created on first use.
    """
    watch.run(lambda c: c.queues_ls(state), output.queues)


@queues.command("show")
@click.argument("name", type=QUEUE_NAME)
def show(name: str) -> None:
    """Show a queue's row and its members."""
    run(lambda c: c.queue_show(name), output.queue_detail)


@queues.command("stats")
@click.argument("name", type=QUEUE_NAME)
@watch.option
def stats(name: str) -> None:
    """Show daemon count, utilisation, backlog."""
    watch.run(lambda c: c.queue_stats(name), output.queue_stats)


@queues.command("events")
@click.argument("name", type=QUEUE_NAME)
@click.option("--verbose", is_flag=True, help="Add each event's detail (before/after, inputs).")
@click.option("--limit", type=click.IntRange(1, 1000), help="Most events to show (default 50).")
def events(name: str, verbose: bool, limit: int | None) -> None:
    """Show a queue's events, newest first.

    Events are recorded changes of the queue and decisions of the controller.
    """
    run(
        lambda c: c.queue_events(name, verbose=verbose, limit=limit),
        lambda evs: output.queue_events(evs, verbose),
    )


@queues.command(
    "patch",
    epilog=(
        "A queue's --kind is fixed at creation, and the elasticity policy (--elasticity) "
        "cannot be changed from the CLI: PATCH the queue's elasticity object over HTTP "
        '(PATCH /v1/namespaces/NS/queues/NAME with {"elasticity": {"kind": ...}}), or '
        "recreate the queue."
    ),
)
@click.argument("name", type=QUEUE_NAME)
@click.option("--description", metavar="D", help="New description.")
@click.option("--max-depth", type=_DepthOrNone(), help="New bound, or 'none' to remove it.")
@click.option("--on-full", type=_ON_FULL, help="What a submit to a full queue does.")
@_scaling_options
def patch(
    name: str, description: str | None, max_depth: Any, on_full: str | None, **scaling: Any
) -> None:
    """Change a queue in place.

    The scaling flags are merged into the queue's current elasticity object.
    """
    body: dict[str, Any] = {
        k: v for k, v in {"description": description, "on_full": on_full}.items() if v is not None
    }
    if max_depth is not None:
        body["max_depth"] = None if max_depth == UNBOUNDED else max_depth
    if elasticity := _elasticity(**scaling):
        body["elasticity"] = elasticity
    if not body:
        raise click.UsageError("nothing to change: give at least one option (see --help)")
    run(lambda c: c.queue_patch(name, body), output.queue)


@queues.command("drain")
@click.argument("name", type=QUEUE_NAME)
def drain(name: str) -> None:
    """Stop admitting work; queued work finishes."""
    run(lambda c: c.queue_drain(name), output.queue)


@queues.command("archive")
@click.argument("name", type=QUEUE_NAME)
def archive(name: str) -> None:
    """Soft-delete a queue, keeping its row.

    An archived queue admits nothing; `unarchive` makes it active again. The `default`
    queue cannot be archived.
    """
    run(lambda c: c.queue_archive(name), output.queue)


@queues.command("unarchive")
@click.argument("name", type=QUEUE_NAME)
def unarchive(name: str) -> None:
    """Make a draining or archived queue active."""
    run(lambda c: c.queue_unarchive(name), output.queue)


@queues.command("rm")
@click.argument("name", type=QUEUE_NAME)
@click.option(
    "--force", is_flag=True, help="First remove NAME from every daemon's queues, then delete."
)
def rm(name: str, force: bool) -> None:
    """Delete a queue for good.

    Refused while daemons pull from it, unless --force. The `default` queue cannot be
    deleted.
    """
    run(lambda c: c.queue_rm(name, force), output.queue_deleted)
