"""The README tells a new user what the CLI really does: its table of groups and verbs, and
the set-up steps a first run needs."""

from __future__ import annotations

import re
from pathlib import Path

import click

from lakeshore.cli.main import lakeshore

README = (Path(__file__).parents[2] / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table_verbs() -> dict[str, set[str]]:
    """The verbs of each row of the CLI table: ``| `group` | `verb verb …` |``, or one code
    span per verb with its arguments (``| `jobs` | `ls [--queue Q]`, `show ID` |``)."""
    rows = re.findall(r"^\| `([a-z]+)` \| (.+) \|$", _section("CLI"), re.MULTILINE)
    verbs = {}
    for group, cell in rows:
        spans = re.findall(r"`([^`]*)`", cell)
        words = spans[0].split() if len(spans) == 1 else [s.split()[0] for s in spans]
        if all(w.isalpha() for w in words):  # not a command's own flags (`server`, `submit`)
            verbs[group] = set(words)
    return verbs


def test_the_cli_table_lists_every_group_with_exactly_its_verbs() -> None:
    ctx = click.Context(lakeshore)
    groups = {}
    for name in lakeshore.list_commands(ctx):
        command = lakeshore.get_command(ctx, name)
        if isinstance(command, click.Group):
            groups[name] = set(command.list_commands(ctx))
    assert _table_verbs() == groups
    assert groups["daemon"] == {"launch", "list", "run", "show", "stop", "update"}
    assert groups["providers"] == {"add", "ls", "patch", "rm", "show"}
    assert groups["compose"] == {"diff", "down", "schema", "up"}


def test_the_set_up_says_how_to_pick_another_nats_port() -> None:
    setup = _section("Set-up (a fresh machine with Python ≥ 3.11)")
    assert "--nats-port P" in setup and "--nats-port 0" in setup
    assert "address in use" in setup


def test_a_provider_of_ones_own_is_created_where_daemon_launch_is_shown() -> None:
    end_to_end = _section("End to end")
    launch = end_to_end.index("daemon launch --provider local")
    for name, kind in (("my-box", "local"), ("my-laptop", "external")):
        add = end_to_end.index(f"lakeshore providers add {name} --kind {kind}")
        assert 0 < add - launch < 1200  # right after the first launch
