"""``lakeshore namespaces``: the namespaces (and, through them, orgs) the token can see."""

from __future__ import annotations

import click

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, run


@click.group(cls=LakeshoreGroup)
def namespaces() -> None:
    """Namespaces and the orgs they belong to.

    A token issued for one namespace authorises every namespace of its org.
    """


@namespaces.command("add")
@click.argument("name")
@click.option("--org", metavar="ORG", help="Org to put it in (default: the token's org).")
def add(name: str, org: str | None) -> None:
    """Create a namespace.

    An org exists once a namespace names it.
    """
    run(lambda c: c.namespaces_add(name, org), output.namespace)


@namespaces.command("ls")
def ls() -> None:
    """List the namespaces the token may see."""
    run(lambda c: c.namespaces_ls(), output.namespaces)


@namespaces.command("show")
@click.argument("name")
def show(name: str) -> None:
    """Show one namespace."""
    run(lambda c: c.namespaces_show(name), output.namespace)
