"""A provider's settings in ``lakeshore.yaml`` against the same settings given on the CLI,
and an ``external`` fleet's refusal, against a real control plane."""

from __future__ import annotations

import shlex

import click
from composing import plan_lines

from lakeshore.cli import daemon_run
from lakeshore.cli.compose import CHANGES_PENDING
from lakeshore.cli.exits import API_ERROR

SSH_FILE = """
    providers:
      gpu: {kind: ssh, config: {hosts: [gpu1], port: 2222, slots: 4, user: lake}}
"""


async def test_cli_settings_equal_to_the_files_show_no_change(cli, compose_file):
    compose_file(SSH_FILE)
    await cli("compose", "up")
    await cli(
        "providers", "patch", "gpu", "--config", "hosts=[gpu1]", "--config", "port=2222",
        "--config", "slots=4", "--config", "user=lake",
    )  # fmt: skip
    await cli("compose", "diff")


async def test_a_quoted_number_in_the_file_equals_a_json_string_on_the_cli(cli, compose_file):
    compose_file("""
        providers:
          box: {kind: external, config: {code: "2222", debug: true, none: null}}
    """)
    await cli("compose", "up")
    await cli(
        "providers", "patch", "box", "--config", 'code="2222"', "--config", "debug=true",
        "--config", "none=null",
    )  # fmt: skip
    await cli("compose", "diff")


async def test_a_string_that_looks_like_a_number_is_a_change_from_the_number(cli, compose_file):
    compose_file(SSH_FILE)
    await cli("compose", "up")
    await cli(
        "providers", "patch", "gpu", "--config", "hosts=[gpu1]", "--config", 'port="2222"',
        "--config", "slots=4", "--config", "user=lake",
    )  # fmt: skip
    diff = await cli("compose", "diff", expect=CHANGES_PENDING)
    [line] = plan_lines(diff.stdout)
    assert line.startswith("~ provider gpu: config: ")
    await cli("compose", "up")
    await cli("compose", "diff")


def daemon_run_commands(text: str) -> list[click.Context]:
    """Every ```lakeshore daemon run …``` of ``text``, parsed by the command's own options
    (a flag it does not have, or a value it refuses, raises)."""
    commands = [c for c in text.split("`")[1::2] if c.startswith("lakeshore daemon run")]
    assert commands, text
    return [daemon_run.run.make_context("run", shlex.split(c)[3:]) for c in commands]


async def test_an_external_fleet_is_refused_with_commands_filled_in(
    cli, compose_file, control_plane, live
):
    compose_file("""
        providers:
          by-hand: {kind: external}
        queues:
          cpu-prep: {}
        daemons:
          prep: {provider: by-hand, queues: [cpu-prep], count: 2}
    """)
    failed = await cli("compose", "up", "--no-wait", expect=API_ERROR)
    message = failed.stderr.splitlines()[0]
    assert "export LAKESHORE_TOKEN=<your token>" in message
    assert control_plane.admin_token not in failed.output
    parsed = [ctx.params for ctx in daemon_run_commands(message)]
    assert [(p["api"], p["name"], p["queues"]) for p in parsed] == [
        (control_plane.api, "prep-00", ["cpu-prep"]),
        (control_plane.api, "prep-01", ["cpu-prep"]),
    ]
    assert {(p["namespace"], p["provider"], p["token"]) for p in parsed} == {
        ("default", "by-hand", None)
    }
    assert await live.workers() == {}
