"""``lakeshore completion bash|zsh|fish``: the shell completion script click generates.

It prints what ``_LAKESHORE_COMPLETE=bash_source lakeshore`` prints, without the user having
to know click's variable. The script calls ``lakeshore`` back with ``_LAKESHORE_COMPLETE``
set on each Tab, and click answers from the commands and options themselves, so it never
goes stale. Set it up with ``eval "$(lakeshore completion bash)"`` in ``~/.bashrc``
(``zsh`` likewise in ``~/.zshrc``; fish: ``lakeshore completion fish | source``).
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

SHELLS = ("bash", "zsh", "fish")


def complete_var(prog_name: str) -> str:
    """The environment variable click's completion reads: ``_LAKESHORE_COMPLETE``."""
    return f"_{prog_name}_COMPLETE".replace("-", "_").upper()


@click.command(
    "completion",
    epilog='Bash: eval "$(lakeshore completion bash)" in ~/.bashrc; zsh: the same with zsh '
    "in ~/.zshrc; fish: lakeshore completion fish | source.",
)
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL (bash, zsh or fish)."""
    root = ctx.find_root()
    prog_name = root.info_name or "lakeshore"
    cls = get_completion_class(shell)
    assert cls is not None  # every name in SHELLS is one of click's own
    click.echo(cls(root.command, {}, prog_name, complete_var(prog_name)).source())


__all__ = ["SHELLS", "complete_var", "completion"]
