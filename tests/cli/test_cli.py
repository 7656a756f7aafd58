"""The ``lakeshore`` CLI, driven through click's runner against the real control plane."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from lakeshore.cli.exits import API_ERROR, OK, USAGE
from lakeshore.cli.main import lakeshore
from lakeshore.sdk import Client

Invoke = Callable[..., Result]


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No settings leak in from the developer's environment or config files."""
    for var in ("LAKESHORE_API", "LAKESHORE_TOKEN", "LAKESHORE_NAMESPACE", "LAKESHORE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def cli(control_plane, isolated) -> Invoke:
    """``cli("queues", "ls")``: the CLI with the control plane's URL and admin token in
    the environment, as a user's shell would have them."""
    env = {"LAKESHORE_API": control_plane.api, "LAKESHORE_TOKEN": control_plane.admin_token}

    def invoke(*args: str, expect: int = OK) -> Result:
        result = CliRunner(env=env).invoke(lakeshore, list(args), prog_name="lakeshore")
        assert result.exit_code == expect, (result.stdout, result.stderr, result.exception)
        assert "Traceback" not in result.output
        return result

    return invoke


def api_body(control_plane, path: str) -> Any:
    async def get() -> Any:
        async with Client(control_plane.api, control_plane.admin_token) as c:
            return await c.request("GET", path)

    return asyncio.run(get())


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()]


def test_queues_add_then_ls_shows_the_row(cli):
    cli("queues", "add", "cpu-prep", "--description", "pre-processing", "--max-depth", "50")
    out = cli("queues", "ls").stdout
    header, *body = out.strip().splitlines()
    assert header.split() == [
        "NAMESPACE", "NAME", "KIND", "STATE", "ELASTICITY", "MAX_DEPTH", "DESCRIPTION"
    ]  # fmt: skip
    assert ["default", "cpu-prep", "fifo", "active", "fixed", "50", "pre-processing"] in [
        line.split() for line in body
    ]


def test_json_output_is_the_api_body(cli, control_plane):
    cli("queues", "add", "cpu-prep")
    for args, path in [
        (("queues", "ls"), "/v1/namespaces/default/queues"),
        (("queues", "show", "cpu-prep"), "/v1/namespaces/default/queues/cpu-prep"),
        (("queues", "stats", "cpu-prep"), "/v1/namespaces/default/queues/cpu-prep/stats"),
        (("namespaces", "ls"), "/v1/namespaces"),
    ]:
        out = cli(*args, "-o", "json").stdout
        assert json.loads(out) == api_body(control_plane, path), args
        assert out.startswith("{\n  ")


def test_yaml_output_is_the_api_body(cli, control_plane):
    out = cli("queues", "show", "default", "-o", "yaml").stdout
    assert yaml.safe_load(out) == api_body(control_plane, "/v1/namespaces/default/queues/default")


def test_global_options_before_the_group_and_after_the_verb(cli, control_plane):
    cli("namespaces", "add", "bob")
    cli("-n", "bob", "queues", "add", "inference")
    inner = json.loads(cli("queues", "show", "inference", "-o", "json", "-n", "bob").stdout)
    assert (inner["name"], inner["namespace"]) == ("inference", "bob")
    outer = json.loads(cli("-o", "json", "--namespace", "bob", "queues", "show", "inference").stdout)
    assert outer == inner
    middle = cli("queues", "-n", "bob", "show", "inference", "--output", "yaml").stdout
    assert yaml.safe_load(middle) == inner


def test_the_innermost_global_option_wins(cli, control_plane):
    cli("namespaces", "add", "bob")
    cli("queues", "add", "inference", "-n", "bob")
    closed = f"http://127.0.0.1:{_closed_port()}"
    out = cli("--api", closed, "-n", "nowhere", "queues", "show", "inference",
              "--api", control_plane.api, "-n", "bob", "-o", "json").stdout  # fmt: skip
    assert json.loads(out)["namespace"] == "bob"
    result = cli("-o", "json", "queues", "show", "inference", "-n", "bob", "-o", "table")
    assert result.stdout.startswith("name:")


def test_flags_override_the_environment(cli, control_plane):
    result = cli("queues", "ls", "--token", "not-a-token", expect=API_ERROR)
    assert result.stderr.startswith("error: ")


def test_patch_has_no_kind_or_elasticity_flag(cli):
    cli("queues", "add", "training-h100", "--kind", "priority")
    for flag in (["--kind", "fifo"], ["--elasticity", "elastic"]):
        result = cli("queues", "patch", "training-h100", *flag, expect=USAGE)
        assert f"No such option: {flag[0]}" in result.stderr
    help_text = cli("queues", "patch", "--help").stdout
    assert "PATCH the queue's elasticity object over HTTP" in " ".join(help_text.split())
    assert "recreate the queue" in " ".join(help_text.split())


def test_patch_scaling_flags_merge_into_elasticity(cli, control_plane):
    cli("queues", "add", "gpu", "--elasticity", "elastic", "--max", "4", "--provider", "local")
    cli("queues", "patch", "gpu", "--max", "8", "--target-pending", "2")
    e = api_body(control_plane, "/v1/namespaces/default/queues/gpu")["elasticity"]
    assert (e["kind"], e["min"], e["max"], e["target_pending"]) == ("elastic", 1, 8, 2)


def test_patch_max_depth_none_removes_the_bound(cli, control_plane):
    cli("queues", "add", "q", "--max-depth", "5")
    cli("queues", "patch", "q", "--max-depth", "none")
    assert api_body(control_plane, "/v1/namespaces/default/queues/q")["max_depth"] is None


def test_patch_without_changes_is_a_usage_error(cli):
    result = cli("queues", "patch", "default", expect=USAGE)
    assert "nothing to change" in result.stderr


def test_queues_has_only_the_irregular_verbs(cli):
    for verb in ("list", "remove"):
        cli("queues", verb, "x", expect=USAGE)
    cli("daemon", "ls", expect=USAGE)


def test_an_api_error_exits_1_with_the_message_on_stderr(cli):
    result = cli("queues", "show", "nope", expect=API_ERROR)
    assert result.stderr.startswith("error: queue 'nope' does not exist in namespace 'default'")
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_default_queue_cannot_be_archived_or_removed(cli):
    for verb in ("archive", "rm"):
        result = cli("queues", verb, "default", expect=API_ERROR)
        assert "reserved" in result.stderr


def test_an_unreachable_api_is_reported_clearly(isolated):
    api = f"http://127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(lakeshore, ["queues", "ls", "--api", api])
    assert result.exit_code == API_ERROR
    assert result.stderr.startswith(f"error: cannot reach the lakeshore api at {api}")
    assert "lakeshore server" in result.stderr and "--api" in result.stderr
    assert "Traceback" not in result.output


def test_lifecycle_verbs(cli):
    cli("queues", "add", "training-h100")
    assert "draining" in cli("queues", "drain", "training-h100").stdout
    assert "archived" in cli("queues", "archive", "training-h100").stdout
    archived = cli("queues", "ls", "--state", "archived").stdout
    assert [r[1] for r in rows(archived)[1:]] == ["training-h100"]
    assert "active" in cli("queues", "unarchive", "training-h100").stdout
    out = cli("queues", "rm", "training-h100").stdout
    assert out.strip() == "deleted queue 'training-h100' from namespace 'default'"
    cli("queues", "show", "training-h100", expect=API_ERROR)


def test_events_are_a_table_and_verbose_adds_the_detail(cli):
    cli("queues", "add", "q")
    cli("queues", "patch", "q", "--description", "changed")
    plain = rows(cli("queues", "events", "q").stdout)
    assert plain[0] == ["TIME", "TYPE", "ACTOR"] and len(plain) >= 3
    verbose = cli("queues", "events", "q", "--verbose", "--limit", "1").stdout
    header, *lines = verbose.strip().splitlines()
    assert header.split() == ["TIME", "TYPE", "ACTOR", "DETAIL"] and len(lines) == 1
    assert "changed" in lines[0]
    cli("queues", "events", "q", "--limit", "0", expect=USAGE)


def test_namespaces_and_tokens(cli, control_plane):
    cli("namespaces", "add", "bob", "--org", "acme")
    assert ["bob", "acme"] in [r[:2] for r in rows(cli("namespaces", "ls").stdout)]
    assert "org:" in cli("namespaces", "show", "bob").stdout
    created = json.loads(cli("tokens", "create", "--description", "ci", "-n", "bob", "-o", "json").stdout)
    listed = json.loads(cli("tokens", "ls", "-n", "bob", "-o", "json").stdout)["tokens"]
    assert [t["id"] for t in listed] == [created["id"]]
    assert "ci" in cli("tokens", "ls", "-n", "bob").stdout
    bob = cli("queues", "ls", "--token", created["token"], "-n", "bob")
    assert "default" in bob.stdout
    cli("tokens", "revoke", created["id"], "-n", "bob")
    result = cli("queues", "ls", "--token", created["token"], "-n", "bob", expect=API_ERROR)
    assert result.stderr.startswith("error: ")


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


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
