"""``lakeshore tokens``: API tokens of a namespace (``-n`` picks it)."""

from __future__ import annotations

import click

from lakeshore.cli import output
from lakeshore.cli.context import LakeshoreGroup, run


@click.group(cls=LakeshoreGroup)
def tokens() -> None:
    """API tokens of a namespace (-n).

    A token is issued for one namespace and authorises every namespace of its org.
    """


@tokens.command("create")
@click.option("--description", metavar="D", default="", help="What the token is for.")
def create(description: str) -> None:
    """Issue a token for the namespace.

    Its secret is printed this once; the server stores only a hash.
    """
    run(lambda c: c.tokens_create(description), output.token_created)


@tokens.command("ls")
def ls() -> None:
    """List tokens (ids and descriptions only)."""
    run(lambda c: c.tokens_ls(), output.tokens)


@tokens.command("revoke")
@click.argument("token_id", metavar="ID")
def revoke(token_id: str) -> None:
    """Revoke a token.

    Requests carrying it are then refused with 401.
    """
    run(lambda c: c.tokens_revoke(token_id), output.token)
