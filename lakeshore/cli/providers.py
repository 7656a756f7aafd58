"""``lakeshore providers``: where daemons are started (``local`` or ``external``).

Like ``queues``, the group's verbs are ``ls`` and ``rm``. Every namespace has the built-in
``local`` provider; these commands create an unknown namespace in the token's org.
"""

from __future__ import annotations

import click
import msgspec

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, run
from lakeshore.cli.options import key_value_pairs
from lakeshore.model import Provider, ProviderKind


def _table(rows: list[Provider]) -> str:
    return output.table(
        ("NAME", "KIND", "CONFIG", "CREATED_AT"),
        ((p.name, p.kind, p.config or None, p.created_at) for p in rows),
    )


def _block(p: Provider) -> str:
    pairs = msgspec.structs.asdict(p)
    pairs["config"] = p.config or None
    return output.block(pairs.items())


@click.group(cls=LakeshoreGroup)
def providers() -> None:
    """Providers: where `lakeshore daemon launch` starts daemons.

    `local` runs them as subprocesses of the control plane on its host (every namespace
    has a built-in `local`); `external` daemons are started by hand with
    `lakeshore daemon run` on any machine that reaches NATS.
    """


@providers.command("add")
@click.argument("name")
@click.option(
    "--kind",
    required=True,
    type=click.Choice([k.value for k in ProviderKind]),
    help="local (subprocesses of the control plane) or external (started by hand).",
)
@click.option(
    "--config",
    "config",
    multiple=True,
    callback=key_value_pairs,
    metavar="K=V",
    help="A setting kept on the provider (repeatable).",
)
def add(name: str, kind: str, config: dict[str, str]) -> None:
    """Add a provider."""
    run(lambda c: c.providers_add(name, kind, config), _block)


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
