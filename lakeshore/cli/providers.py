"""``lakeshore providers``: where daemons are started (``local``, ``external``, ``ssh``,
``slurm``).

Like ``queues``, the group's verbs are ``ls`` and ``rm``. Every namespace has the built-in
``local`` provider; these commands create an unknown namespace in the token's org.
"""

from __future__ import annotations

from typing import Any

import click
import msgspec

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, run
from lakeshore.cli.options import key_value_pairs, settings
from lakeshore.model import Provider, ProviderKind


def _table(rows: list[Provider]) -> str:
    return output.table(
        ("NAME", "KIND", "CONFIG", "LABELS", "CREATED_AT"),
        ((p.name, p.kind, p.config or None, p.labels or None, p.created_at) for p in rows),
    )


def _block(p: Provider) -> str:
    pairs = msgspec.structs.asdict(p)
    pairs["config"] = p.config or None
    pairs["labels"] = p.labels or None
    return output.block(pairs.items())


_CONFIG_HELP = (
    "A setting (repeatable): K=V, a list as K=[a, b], a mapping as K={k: v}. Numbers, "
    "true, false and null are typed (port=2222 is a number); anything else is a string, "
    "and a JSON string keeps a number-like value one: port='\"2222\"'. "
    "ssh: hosts, user, port, identity_file, known_hosts, python, slots, …; "
    "slurm: partition, gres, time, account, python, …; see docs/providers.md."
)


@click.group(cls=LakeshoreGroup)
def providers() -> None:
    """Providers: where `lakeshore daemon launch` starts daemons.

    `local` runs them as subprocesses of the control plane on its host (every namespace
    has a built-in `local`); `external` daemons are started by hand with
    `lakeshore daemon run` on any machine that reaches NATS; `ssh` starts them over SSH
    on a list of hosts; `slurm` runs each as a Slurm job.
    """


@providers.command("add")
@click.argument("name")
@click.option(
    "--kind",
    required=True,
    type=click.Choice([k.value for k in ProviderKind]),
    help="local (subprocesses of the control plane), external (started by hand), ssh "
    "(over SSH on a list of hosts) or slurm (one Slurm job per daemon).",
)
@click.option(
    "--config", "config", multiple=True, callback=settings, metavar="K=V", help=_CONFIG_HELP
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    callback=key_value_pairs,
    metavar="K=V",
    help="A label kept on the provider (repeatable).",
)
def add(name: str, kind: str, config: dict[str, Any], labels: dict[str, str]) -> None:
    """Add a provider."""
    run(lambda c: c.providers_add(name, kind, config, labels=labels), _block)


@providers.command("patch")
@click.argument("name")
@click.option(
    "--config",
    "config",
    multiple=True,
    callback=settings,
    metavar="K=V",
    help="Replace the whole config with these settings (repeatable; typed as for add).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    callback=key_value_pairs,
    metavar="K=V",
    help="Replace the labels with these (repeatable).",
)
def patch(name: str, config: dict[str, Any], labels: dict[str, str]) -> None:
    """Replace a provider's config and/or labels (its kind is fixed).

    Daemons already running keep what they were started with; the next launch uses the
    new settings.
    """
    if not config and not labels:
        raise click.UsageError("nothing to change: give --config K=V or --label K=V")
    run(
        lambda c: c.providers_patch(name, config=config or None, labels=labels or None),
        _block,
    )


@providers.command("ls")
def ls() -> None:
    """List the namespace's providers, the built-in `local` first."""
    run(lambda c: c.providers_ls(), _table)


@providers.command("show")
@click.argument("name")
def show(name: str) -> None:
    """Show one provider."""
    run(lambda c: c.providers_show(name), _block)


@providers.command("rm")
@click.argument("name")
def rm(name: str) -> None:
    """Delete a provider (the built-in `local` cannot be deleted)."""
    run(lambda c: c.providers_rm(name), lambda p: f"deleted provider {p.name!r}")
