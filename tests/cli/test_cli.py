"""The ``lakeshore`` CLI, driven through click's runner against the real control plane."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from typing import Any

import yaml
from click.testing import CliRunner

from lakeshore.cli.exits import API_ERROR, OK, USAGE
from lakeshore.cli.main import lakeshore
from lakeshore.config import write_client_config
from lakeshore.sdk import Client
from lakeshore.sdk import queues as sdk_queues


async def api_body(control_plane, path: str) -> Any:
    async with Client(control_plane.api, control_plane.admin_token) as c:
        return await c.request("GET", path)


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()]


async def test_queues_add_then_ls_shows_the_row(cli):
    await cli("queues", "add", "cpu-prep", "--description", "pre-processing", "--max-depth", "50")
    out = (await cli("queues", "ls")).stdout
    header, *body = out.strip().splitlines()
    assert header.split() == [
        "NAMESPACE", "NAME", "KIND", "STATE", "ELASTICITY", "MAX_DEPTH", "DESCRIPTION"
    ]  # fmt: skip
    assert ["default", "cpu-prep", "fifo", "active", "fixed", "50", "pre-processing"] in [
        line.split() for line in body
    ]


async def test_json_output_is_the_api_body(cli, control_plane):
    await cli("queues", "add", "cpu-prep")
    for args, path in [
        (("queues", "ls"), "/v1/namespaces/default/queues"),
        (("queues", "show", "cpu-prep"), "/v1/namespaces/default/queues/cpu-prep"),
        (("queues", "stats", "cpu-prep"), "/v1/namespaces/default/queues/cpu-prep/stats"),
        (("namespaces", "ls"), "/v1/namespaces"),
    ]:
        out = (await cli(*args, "-o", "json")).stdout
        assert json.loads(out) == await api_body(control_plane, path), args
        assert out.startswith("{\n  ")


async def test_queues_ls_follows_pages(cli, control_plane, monkeypatch):
    monkeypatch.setattr(sdk_queues, "LS_PAGE", 2)
    for name in ["q-3", "q-1", "q-2"]:
        await cli("queues", "add", name)
    listed = json.loads((await cli("queues", "ls", "-o", "json")).stdout)
    assert listed == await api_body(control_plane, "/v1/namespaces/default/queues")
    assert [q["name"] for q in listed["queues"]] == ["default", "q-1", "q-2", "q-3"]
    table = rows((await cli("queues", "ls")).stdout)
    assert [r[1] for r in table[1:]] == ["default", "q-1", "q-2", "q-3"]


async def test_yaml_output_is_the_api_body(cli, control_plane):
    out = (await cli("queues", "show", "default", "-o", "yaml")).stdout
    assert yaml.safe_load(out) == await api_body(
        control_plane, "/v1/namespaces/default/queues/default"
    )


async def test_global_options_before_the_group_and_after_the_verb(cli, control_plane):
    await cli("namespaces", "add", "bob")
    await cli("-n", "bob", "queues", "add", "inference")
    inner = json.loads((await cli("queues", "show", "inference", "-o", "json", "-n", "bob")).stdout)
    assert (inner["name"], inner["namespace"]) == ("inference", "bob")
    outer = json.loads(
        (await cli("-o", "json", "--namespace", "bob", "queues", "show", "inference")).stdout
    )
    assert outer == inner
    middle = (await cli("queues", "-n", "bob", "show", "inference", "--output", "yaml")).stdout
    assert yaml.safe_load(middle) == inner


async def test_the_innermost_global_option_wins(cli, control_plane):
    await cli("namespaces", "add", "bob")
    await cli("queues", "add", "inference", "-n", "bob")
    closed = f"http://127.0.0.1:{_closed_port()}"
    outer = ["--api", closed, "-n", "nowhere"]
    inner = ["--api", control_plane.api, "-n", "bob", "-o", "json"]
    out = (await cli(*outer, "queues", "show", "inference", *inner)).stdout
    assert json.loads(out)["namespace"] == "bob"
    result = await cli("-o", "json", "queues", "show", "inference", "-n", "bob", "-o", "table")
    assert result.stdout.startswith("name:")


async def test_flags_override_the_environment(cli):
    result = await cli("queues", "ls", "--token", "not-a-token", expect=API_ERROR)
    assert result.stderr == "error: unknown or revoked token\n"


async def test_patch_has_no_kind_or_elasticity_flag(cli):
    await cli("queues", "add", "training-h100", "--kind", "priority")
    for flag in (["--kind", "fifo"], ["--elasticity", "elastic"]):
        result = await cli("queues", "patch", "training-h100", *flag, expect=USAGE)
        assert f"No such option '{flag[0]}'" in result.stderr
    help_text = (await cli("queues", "patch", "--help")).stdout
    assert "PATCH the queue's elasticity object over HTTP" in " ".join(help_text.split())
    assert "recreate the queue" in " ".join(help_text.split())


async def test_patch_scaling_flags_merge_into_elasticity(cli, control_plane):
    await cli(
        "queues", "add", "gpu", "--elasticity", "elastic", "--max", "4", "--provider", "local"
    )
    await cli("queues", "patch", "gpu", "--max", "8", "--target-pending", "2")
    e = (await api_body(control_plane, "/v1/namespaces/default/queues/gpu"))["elasticity"]
    assert (e["kind"], e["min"], e["max"], e["target_pending"]) == ("elastic", 1, 8, 2)


async def test_patch_max_depth_none_removes_the_bound(cli, control_plane):
    await cli("queues", "add", "q", "--max-depth", "5")
    await cli("queues", "patch", "q", "--max-depth", "none")
    assert (await api_body(control_plane, "/v1/namespaces/default/queues/q"))["max_depth"] is None


async def test_patch_without_changes_is_a_usage_error(cli):
    result = await cli("queues", "patch", "default", expect=USAGE)
    assert "nothing to change" in result.stderr


async def test_queues_has_only_the_irregular_verbs(cli):
    for verb in ("list", "remove"):
        await cli("queues", verb, "x", expect=USAGE)
    await cli("daemon", "ls", expect=USAGE)


async def test_an_api_error_exits_1_with_the_message_on_stderr(cli):
    result = await cli("queues", "show", "nope", expect=API_ERROR)
    assert result.stderr.startswith("error: queue 'nope' does not exist in namespace 'default'")
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


async def test_default_queue_cannot_be_archived_or_removed(cli):
    for verb in ("archive", "rm"):
        result = await cli("queues", verb, "default", expect=API_ERROR)
        assert "reserved" in result.stderr


def test_an_unreachable_api_is_reported_clearly(isolated):
    api = f"http://127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(lakeshore, ["queues", "ls", "--api", api])
    assert result.exit_code == API_ERROR
    assert result.stderr.startswith(f"error: cannot reach the lakeshore api at {api}")
    assert "lakeshore server" in result.stderr and "--api" in result.stderr
    assert "Traceback" not in result.output


async def test_lifecycle_verbs(cli):
    await cli("queues", "add", "training-h100")
    assert "draining" in (await cli("queues", "drain", "training-h100")).stdout
    assert "archived" in (await cli("queues", "archive", "training-h100")).stdout
    archived = (await cli("queues", "ls", "--state", "archived")).stdout
    assert [r[1] for r in rows(archived)[1:]] == ["training-h100"]
    assert "active" in (await cli("queues", "unarchive", "training-h100")).stdout
    out = (await cli("queues", "rm", "training-h100")).stdout
    assert out.strip() == "deleted queue 'training-h100' from namespace 'default'"
    await cli("queues", "show", "training-h100", expect=API_ERROR)


async def test_events_are_a_table_and_verbose_adds_the_detail(cli):
    await cli("queues", "add", "q")
    await cli("queues", "patch", "q", "--description", "changed")
    plain = rows((await cli("queues", "events", "q")).stdout)
    assert plain[0] == ["TIME", "TYPE", "ACTOR"] and len(plain) >= 3
    verbose = (await cli("queues", "events", "q", "--verbose", "--limit", "1")).stdout
    header, *lines = verbose.strip().splitlines()
    assert header.split() == ["TIME", "TYPE", "ACTOR", "DETAIL"] and len(lines) == 1
    assert "changed" in lines[0]
    await cli("queues", "events", "q", "--limit", "0", expect=USAGE)


async def test_namespaces_and_tokens(cli, control_plane):
    await cli("namespaces", "add", "bob", "--org", "acme")
    assert ["bob", "acme"] in [r[:2] for r in rows((await cli("namespaces", "ls")).stdout)]
    assert "org:" in (await cli("namespaces", "show", "bob")).stdout
    created = json.loads(
        (await cli("tokens", "create", "--description", "ci", "-n", "bob", "-o", "json")).stdout
    )
    listed = json.loads((await cli("tokens", "ls", "-n", "bob", "-o", "json")).stdout)["tokens"]
    assert [t["id"] for t in listed] == [created["id"]]
    assert "ci" in (await cli("tokens", "ls", "-n", "bob")).stdout
    bob = await cli("queues", "ls", "--token", created["token"], "-n", "bob")
    assert "default" in bob.stdout
    await cli("tokens", "revoke", created["id"], "-n", "bob")
    result = await cli("queues", "ls", "--token", created["token"], "-n", "bob", expect=API_ERROR)
    assert result.stderr == "error: unknown or revoked token\n"


async def test_settings_come_from_the_config_file_the_server_writes(control_plane, isolated):
    write_client_config(
        ".lakeshore/config.toml", api=control_plane.api, token=control_plane.admin_token,
        namespace="default",
    )  # fmt: skip
    result = await asyncio.to_thread(CliRunner().invoke, lakeshore, ["queues", "ls", "-o", "json"])
    assert result.exit_code == OK, result.stderr
    assert [q["name"] for q in json.loads(result.stdout)["queues"]] == ["default"]


def test_a_bad_config_is_reported_without_a_traceback(isolated, monkeypatch, tmp_path):
    monkeypatch.setenv("LAKESHORE_CONFIG", str(tmp_path / "missing.toml"))
    result = CliRunner().invoke(lakeshore, ["queues", "ls"])
    assert result.exit_code == API_ERROR
    assert result.stderr.startswith("error: LAKESHORE_CONFIG names")
    assert "Traceback" not in result.output


def test_help_lists_every_group(isolated):
    result = CliRunner().invoke(lakeshore, ["--help"])
    assert result.exit_code == OK
    commands = result.stdout.split("Commands:", 1)[1].split()
    assert {"daemon", "namespaces", "queues", "server", "tokens"} <= set(commands)


def test_the_cli_never_imports_the_control_plane(isolated):
    probe = (
        "import sys\n"
        "from lakeshore.cli.main import lakeshore\n"
        "lakeshore(['queues', 'ls', '--help'], standalone_mode=False)\n"
        "heavy = {'duckdb', 'nats', 'lakeshore.plane', 'lakeshore.http', 'lakeshore.store'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


async def test_the_worked_example_of_the_spec(cli, control_plane, register):
    await cli("queues", "add", "cpu-prep", "--kind", "fifo", "--elasticity", "fixed")
    await cli("queues", "add", "training-h100", "--kind", "priority", "--elasticity", "fixed")
    # Stands in for `daemon launch --count 4 --name prep` and `--count 2 --name train`.
    for i in range(4):
        await register(f"prep-{i:02}", queues=["cpu-prep"])
    for i in range(2):
        await register(f"train-{i:02}", queues=["training-h100"])

    listed = {tuple(r[:5]) for r in rows((await cli("queues", "ls")).stdout)[1:]}
    assert {
        ("default", "default", "fifo", "active", "fixed"),
        ("default", "cpu-prep", "fifo", "active", "fixed"),
        ("default", "training-h100", "priority", "active", "fixed"),
    } <= listed
    active = {
        tuple(r[:5]) for r in rows((await cli("queues", "ls", "--state", "active")).stdout)[1:]
    }
    assert active == listed

    daemons = rows((await cli("daemon", "list")).stdout)
    assert daemons[0][:4] == ["NAME", "ID", "STATUS", "QUEUES"]
    by_name = {r[0]: r for r in daemons[1:]}
    assert sorted(by_name) == ["prep-00", "prep-01", "prep-02", "prep-03", "train-00", "train-01"]
    assert by_name["train-01"][3] == "[training-h100]"

    shown = (await cli("queues", "show", "training-h100")).stdout
    assert "kind:" in shown and "priority" in shown and "on_full:" in shown
    members = shown.split("members: 2\n", 1)[1]
    assert sorted(r[1] for r in rows(members)[1:]) == ["train-00", "train-01"]

    stats = dict(
        line.split(":", 1)
        for line in (await cli("queues", "stats", "training-h100")).stdout.splitlines()
    )
    assert {k: stats[k].strip() for k in ("daemon_count", "utilization", "pending")} == {
        "daemon_count": "2",
        "utilization": "0.0",
        "pending": "0",
    }

    updated = (await cli("daemon", "update", "train-00", "--add-queue", "eval")).stdout
    assert "[training-h100, eval]" in updated
    updated = (await cli("daemon", "update", "train-00", "--remove-queue", "eval")).stdout
    assert "[training-h100]" in updated and "eval" not in updated

    await cli("queues", "patch", "training-h100", "--max-depth", "1000", "--on-full", "reject")
    await cli("queues", "patch", "training-h100", "--description", "h100 production")
    row = await api_body(control_plane, "/v1/namespaces/default/queues/training-h100")
    assert (row["max_depth"], row["on_full"], row["description"]) == (
        1000,
        "reject",
        "h100 production",
    )
    assert (row["kind"], row["elasticity"]["kind"]) == ("priority", "fixed")


async def test_daemon_show_spells_out_the_default_queue(cli, register):
    await register("scratch")
    shown = (await cli("daemon", "show", "scratch")).stdout
    assert "queues:" in shown and "[]  (the default queue)" in shown
    body = json.loads((await cli("daemon", "show", "scratch", "-o", "json")).stdout)
    assert body["queues"] == []
    result = await cli("daemon", "update", "scratch", "--add-queue", "default", expect=API_ERROR)
    assert result.stderr.startswith("error: ") and "default" in result.stderr
    await cli("daemon", "update", "scratch", expect=USAGE)


async def test_daemon_update_warns_of_a_queue_that_does_not_exist_yet(cli, register):
    await register("train-00")
    result = await cli("daemon", "update", "train-00", "--add-queue", "eval")
    assert "[eval]" in result.stdout and "warning" not in result.stdout
    [warning] = result.stderr.splitlines()
    assert warning.startswith("warning: queue_not_found: queue 'eval' does not exist")
    as_json = await cli("daemon", "update", "train-00", "--add-queue", "more", "-o", "json")
    body = json.loads(as_json.stdout)
    assert body["queues"] == ["eval", "more"] and len(body["warnings"]) == 1
    assert as_json.stderr.startswith("warning: queue_not_found: queue 'more'")
    await cli("queues", "add", "eval")
    quiet = await cli("daemon", "update", "train-00", "--remove-queue", "more")
    assert quiet.stderr == "" and "[eval]" in quiet.stdout


async def test_rm_refuses_a_queue_with_members_unless_forced(cli, register):
    await cli("queues", "add", "training-h100")
    await register("train-00", queues=["training-h100"])
    result = await cli("queues", "rm", "training-h100", expect=API_ERROR)
    assert "still has 1 member(s) (train-00)" in result.stderr
    out = (await cli("queues", "rm", "training-h100", "--force")).stdout
    assert "removed it from [train-00]" in out
    body = json.loads((await cli("daemon", "show", "train-00", "-o", "json")).stdout)
    assert body["queues"] == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
