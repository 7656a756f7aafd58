"""``lakeshore daemon launch / stop / run`` and ``lakeshore providers``, with real daemons."""

from __future__ import annotations

import json
import shlex
import sys

from click.testing import CliRunner

from lakeshore.cli import daemon_run
from lakeshore.cli.exits import API_ERROR, OK, USAGE
from lakeshore.cli.main import lakeshore
from lakeshore.model import ProviderKind
from lakeshore.sdk import Client


async def workers(control_plane) -> dict[str, str]:
    async with Client(control_plane.api, control_plane.admin_token) as c:
        return {w.name: w.status for w in await c.workers_ls()}


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()]


async def test_launch_wait_returns_once_every_daemon_has_registered(cli, control_plane):
    result = await cli(
        "daemon", "launch", "--provider", "local", "--queue", "q", "--count", "2",
        "--name", "prep", "--wait",
    )  # fmt: skip
    table = rows(result.stdout)
    assert table[0][:3] == ["NAME", "ID", "STATUS"]
    # The table shows the daemons once registered, not as they were launched.
    assert [(r[0], r[3]) for r in table[1:]] == [("prep-00", "[q]"), ("prep-01", "[q]")]
    assert {r[2] for r in table[1:]} <= {"idle", "busy"}
    progress = result.stderr.strip().splitlines()
    assert progress[-1].startswith("2/2 registered (")
    assert all(line.split()[0].endswith("/2") for line in progress)
    assert set((await workers(control_plane)).values()) <= {"idle", "busy"}
    shown = (await cli("daemon", "show", "prep-01")).stdout
    assert "provider:" in shown and "local" in shown


async def test_launch_prints_the_api_body_as_json(cli):
    out = (await cli("daemon", "launch", "--name", "scratch", "-o", "json")).stdout
    [row] = json.loads(out)["workers"]
    assert (row["name"], row["status"], row["queues"]) == ("scratch", "starting", [])


async def test_stop_retires_a_daemon_and_waits_until_it_has_stopped(cli, control_plane):
    await cli("daemon", "launch", "--name", "solo", "--wait")
    result = await cli("daemon", "stop", "solo", "--wait")
    shown = dict(line.split(":", 1) for line in result.stdout.splitlines())
    assert (shown["name"].strip(), shown["status"].strip()) == ("solo", "retiring")
    assert result.stderr.strip().endswith("daemon solo stopped")
    assert (await workers(control_plane))["solo"] == "stopped"


async def test_launching_a_name_in_use_exits_1(cli):
    await cli("daemon", "launch", "--name", "twice")
    result = await cli("daemon", "launch", "--name", "twice", expect=API_ERROR)
    assert result.stderr.startswith("error: worker 'twice' already exists")


async def test_an_external_provider_refuses_with_the_daemon_run_hint(cli, control_plane):
    await cli("providers", "add", "my-ec2", "--kind", "external")
    result = await cli(
        "daemon", "launch", "--provider", "my-ec2", "--name", "x", "--wait", expect=API_ERROR
    )
    hint = " ".join(result.stderr.split())
    assert "`export LAKESHORE_TOKEN=<your token>`" in hint
    assert control_plane.admin_token not in result.output
    commands = [c for c in hint.split("`")[1::2] if c.startswith("lakeshore daemon run")]
    [ctx] = [daemon_run.run.make_context("run", shlex.split(c)[3:]) for c in commands]
    assert (ctx.params["namespace"], ctx.params["provider"]) == ("default", "my-ec2")
    assert ctx.params["token"] is None
    assert await workers(control_plane) == {}


async def test_launch_wait_fails_when_a_daemon_dies_before_registering(cli, control_plane):
    control_plane.plane.parts.providers[ProviderKind.LOCAL].command = (
        sys.executable, "-c", "import sys; sys.exit('boom: no nats here')",
    )  # fmt: skip
    result = await cli("daemon", "launch", "--name", "doomed", "--wait", expect=API_ERROR)
    progress, error = result.stderr.strip().splitlines()
    assert progress == "0/1 registered"
    assert error == (
        "error: daemon doomed is lost before it registered: exited with code 1; "
        "last output: boom: no nats here"
    )


async def test_launch_wait_gives_up_after_the_timeout(cli):
    result = await cli(
        "daemon", "launch", "--name", "slow", "--wait", "--timeout", "0.001", expect=API_ERROR
    )
    assert result.stderr.startswith("error: timed out after 0.001s")
    assert "still starting: slow" in result.stderr


async def test_providers_add_ls_show_rm(cli):
    added = await cli("providers", "add", "my-cpu", "--kind", "local", "--config", "zone=a")
    assert "my-cpu" in added.stdout and '{"zone":"a"}' in added.stdout
    listed = rows((await cli("providers", "ls")).stdout)
    assert listed[0] == ["NAME", "KIND", "CONFIG", "LABELS", "CREATED_AT"]
    assert [r[:2] for r in listed[1:]] == [["local", "local"], ["my-cpu", "local"]]
    body = json.loads((await cli("providers", "show", "my-cpu", "-o", "json")).stdout)
    assert body["config"] == {"zone": "a"}
    assert (await cli("providers", "rm", "my-cpu")).stdout.strip() == "deleted provider 'my-cpu'"
    refused = await cli("providers", "rm", "local", expect=API_ERROR)
    assert "built in" in refused.stderr
    bad = await cli("providers", "add", "x", "--kind", "local", "--config", "novalue", expect=2)
    assert "KEY=VALUE" in bad.stderr


async def test_provider_settings_take_lists_and_mappings_and_patch_replaces_them(cli):
    await cli(
        "providers", "add", "gpu", "--kind", "local", "--label", "team=ml",
        "--config", "hosts=[gpu1, gpu2]", "--config", "env={A: b}", "--config", "port=22",
    )  # fmt: skip
    body = json.loads((await cli("providers", "show", "gpu", "-o", "json")).stdout)
    assert body["config"] == {"hosts": ["gpu1", "gpu2"], "env": {"A": "b"}, "port": 22}
    assert body["labels"] == {"team": "ml"}
    await cli("providers", "patch", "gpu", "--config", "hosts=[gpu3]")
    body = json.loads((await cli("providers", "show", "gpu", "-o", "json")).stdout)
    assert (body["config"], body["labels"]) == ({"hosts": ["gpu3"]}, {"team": "ml"})
    bad = await cli("providers", "patch", "gpu", "--config", "hosts=[gpu1", expect=2)
    assert "hosts=[gpu1" in bad.stderr and "[a, b]" in bad.stderr
    assert "nothing to change" in (await cli("providers", "patch", "gpu", expect=2)).stderr


async def test_providers_create_an_unknown_namespace(cli, control_plane):
    await cli("providers", "add", "ext", "--kind", "external", "-n", "fresh")
    async with Client(control_plane.api, control_plane.admin_token) as c:
        assert (await c.namespaces_show("fresh")).org == "default"


async def test_providers_ls_of_an_unknown_namespace_creates_nothing(cli, control_plane):
    refused = await cli("providers", "ls", "-n", "nowhere", expect=1)
    assert "namespace 'nowhere' does not exist" in refused.stderr
    async with Client(control_plane.api, control_plane.admin_token) as c:
        assert "nowhere" not in [ns.name for ns in await c.namespaces_ls()]


def test_run_is_a_command_of_the_daemon_group(isolated):
    listed = CliRunner().invoke(lakeshore, ["daemon", "--help"])
    assert listed.exit_code == OK
    commands = listed.stdout.split("Commands:", 1)[1].split()
    assert {"launch", "list", "run", "show", "stop", "update"} <= set(commands)
    run_help = CliRunner().invoke(lakeshore, ["daemon", "run", "--help"])
    assert run_help.exit_code == OK and "--nats-url" in run_help.stdout


def test_run_says_to_give_the_token_in_lakeshore_token_not_on_the_command_line(isolated):
    shown = CliRunner().invoke(lakeshore, ["daemon", "run", "--help"], terminal_width=200)
    assert shown.exit_code == OK
    token_help = shown.stdout.split("--token", 1)[1].split("\n  --", 1)[0]
    assert "Prefer LAKESHORE_TOKEN" in token_help and "(ps)" in token_help, token_help


def test_run_without_a_token_names_lakeshore_token(isolated):
    refused = CliRunner().invoke(lakeshore, ["daemon", "run", "--api", "http://127.0.0.1:1"])
    assert refused.exit_code == USAGE
    assert "set LAKESHORE_TOKEN" in refused.stderr
