"""The ``external`` backend's refusal: commands a user can paste, parsed here by
``lakeshore daemon run``'s own options."""

from __future__ import annotations

import shlex

import click
import pytest

from lakeshore.cli import daemon_run
from lakeshore.errors import Conflict
from lakeshore.model import Provider, ProviderKind, now
from lakeshore.providers.external import ExternalProvider, daemon_run_command, refusal

BY_HAND = Provider(name="by-hand", namespace="ml", kind=ProviderKind.EXTERNAL, created_at=now())


def daemon_run_commands(text: str) -> list[click.Context]:
    """Every ```lakeshore daemon run …``` of ``text``, parsed by the command's own options
    (a flag it does not have, or a value it refuses, raises)."""
    commands = [c for c in text.split("`")[1::2] if c.startswith("lakeshore daemon run")]
    assert commands, text
    return [daemon_run.run.make_context("run", shlex.split(c)[3:]) for c in commands]


def test_the_command_is_filled_with_what_is_known_and_parses_as_daemon_run():
    command = daemon_run_command(
        BY_HAND, api="http://plane:8080,http://other:8080", name="prep-00", queues=["a", "b"]
    )
    [ctx] = daemon_run_commands(f"`{command}`")
    assert ctx.params["api"] == "http://plane:8080,http://other:8080"
    assert (ctx.params["namespace"], ctx.params["provider"]) == ("ml", "by-hand")
    assert (ctx.params["name"], ctx.params["queues"]) == ("prep-00", ["a", "b"])
    assert ctx.params["token"] is None


def test_a_value_the_shell_would_split_is_quoted():
    [ctx] = daemon_run_commands(f"`{daemon_run_command(BY_HAND, name='a b; rm -rf ~')}`")
    assert ctx.params["name"] == "a b; rm -rf ~"


def test_the_refusal_sets_the_token_from_the_environment_and_shows_one_command_per_name():
    text = refusal(BY_HAND, api="http://plane:8080", names=["n-00", "n-01"], queues=["q"])
    assert "`export LAKESHORE_TOKEN=<your token>`" in text
    parsed = [(c.params["name"], c.params["queues"]) for c in daemon_run_commands(text)]
    assert parsed == [("n-00", ["q"]), ("n-01", ["q"])]
    assert "Add " not in text


def test_what_is_not_known_is_left_out_and_said_how_to_add():
    text = refusal(BY_HAND)
    [ctx] = daemon_run_commands(text)
    assert (ctx.params["api"], ctx.params["name"], ctx.params["queues"]) == (None, None, [])
    assert "--api URL" in text and "--queue Q" in text and "LAKESHORE_TOKEN" in text


def test_check_launch_refuses_with_the_filled_commands():
    backend = ExternalProvider(api_url=lambda: "http://plane:8080")
    with pytest.raises(Conflict) as refused:
        backend.check_launch(BY_HAND, names=["x"], queues=["q"])
    [ctx] = daemon_run_commands(refused.value.message)
    assert (ctx.params["api"], ctx.params["name"], ctx.params["queues"]) == (
        "http://plane:8080",
        "x",
        ["q"],
    )
