"""The ``lakeshore`` command: a thin client of the HTTP API (``lakeshore.sdk``).

Nothing here imports the control plane: ``server``, the one command that runs it, is
imported only when it is invoked (or listed by ``--help``).
"""

from __future__ import annotations

import click

from lakeshore.cli.backup import backup, restore
from lakeshore.cli.code import code
from lakeshore.cli.completion import completion
from lakeshore.cli.compose import compose
from lakeshore.cli.context import LakeshoreGroup
from lakeshore.cli.controller import controller
from lakeshore.cli.daemon import daemon
from lakeshore.cli.history import history
from lakeshore.cli.jobs import jobs
from lakeshore.cli.namespaces import namespaces
from lakeshore.cli.nats import nats
from lakeshore.cli.providers import providers
from lakeshore.cli.queues import queues
from lakeshore.cli.stats import stats
from lakeshore.cli.submit import submit
from lakeshore.cli.tokens import tokens

_LAZY = ("server",)


class _Root(LakeshoreGroup):
    """The top group; it adds the lazily imported commands when they are asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY and cmd_name not in self.commands:
            _add_server(self)
        return super().get_command(ctx, cmd_name)


def _add_server(group: click.Group) -> None:
    # Imported here: it pulls in the control plane (NATS, DuckDB), which no client needs.
    from lakeshore.cli.server import server

    group.add_command(server)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
def lakeshore() -> None:
    """Lakeshore: named queues of work, pulled by daemons on any machine.

    The global options (--api, --token, -n/--namespace, -o/--output) are accepted here and
    after any command; the innermost one given wins. Unset ones come from LAKESHORE_API,
    LAKESHORE_TOKEN, LAKESHORE_NAMESPACE, then the config file `lakeshore server` writes.
    --api and LAKESHORE_API take one URL, or several separated by commas: the CLI follows
    the leader among them.
    """


for _group in (queues, daemon, namespaces, tokens, jobs, submit, providers, controller, nats):
    lakeshore.add_command(_group)
lakeshore.add_command(compose)
lakeshore.add_command(stats)
lakeshore.add_command(history)
lakeshore.add_command(completion)
lakeshore.add_command(backup)
lakeshore.add_command(code)
lakeshore.add_command(restore)


def main() -> None:
    """Console-script entry point."""
    lakeshore(prog_name="lakeshore")
