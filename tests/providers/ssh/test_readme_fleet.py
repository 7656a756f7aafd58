"""The README's worked example (the user's document's, with ``my-ec2`` and ``my-gpu`` as
real ssh providers) runs as written, and so does its compose file.

The commands are read from the README. The test's sshd stands in for "localhost": each
``providers add`` gets this sshd's address, port, keys and log dir appended (what a
reader's own ``~/.ssh`` and port 22 give them), and ``$PWD/.venv/bin/python`` is this
interpreter. Everything else is run exactly as the README shows it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml
from clirunner import cli_for
from polling import eventually
from ssh_fleet import GONE, WAIT_S
from sshd import HOSTS, runs

README = (Path(__file__).parents[3] / "README.md").read_text()
SECTION = README.split("## Fleets over SSH and Slurm: the worked example\n", 1)[1].split("\n## ")[0]
PROGRAM = ".venv/bin/lakeshore "


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", SECTION, re.DOTALL)


def _commands() -> list[tuple[str | None, list[str]]]:
    """Every ``.venv/bin/lakeshore …`` line of the section's worked example (its shell block
    that adds the providers), as argv with the shell variable its output is kept in
    (``BIG=$(…)``; else ``None``). The one-time ``ssh-keygen`` lines are the reader's own
    set-up; the block before it clears away what the README's earlier sections made."""
    commands = []
    [example] = [b for b in _blocks("sh") if "providers add" in b]
    for line in example.splitlines():
        kept = re.match(r"([A-Z_]+)=\$\((.*?)\)(\s*#.*)?$", line)
        var, line = (kept.group(1), kept.group(2)) if kept else (None, line)
        if line.startswith(PROGRAM):
            line = line.replace("$PWD/.venv/bin/python", sys.executable)
            commands.append((var, shlex.split(line[len(PROGRAM) :], comments=True)))
    return commands


def _stand_in(fleet: Any, argv: list[str]) -> list[str]:
    """``providers add``: on the test sshd instead of the reader's localhost:22."""
    if argv[:2] != ["providers", "add"]:
        return argv
    argv = [a.replace("hosts=[localhost]", f"hosts=[{HOSTS[0]}]") for a in argv]
    reach = fleet.config()
    for key in ("port", "user", "identity_file", "known_hosts", "log_dir"):
        argv += ["--config", f"{key}={reach[key]}"]
    return argv


async def _run(fleet: Any, argv: list[str]) -> str:
    return (await cli_for(fleet.handle)(*argv)).stdout


def _tasks_py() -> str:
    """The README's ``tasks.py`` (its End to end section's), which the reader's directory
    holds when the worked example ships it (``submit --code .``)."""
    after = README.split("Save this as `tasks.py`", 1)[1]
    return re.search(r"```python\n(.*?)```", after, re.DOTALL).group(1)  # type: ignore[union-attr]


async def test_the_worked_example_runs_on_two_ssh_providers(fleet, tmp_path, monkeypatch):
    reader = tmp_path / "reader"  # the reader's directory: not the daemons' (their HOME)
    reader.mkdir()
    (reader / "tasks.py").write_text(_tasks_py())
    monkeypatch.chdir(reader)
    commands = _commands()
    assert [c[:2] for _, c in commands[:2]] == [["providers", "add"]] * 2
    assert {c[2] for _, c in commands[:2]} == {"my-ec2", "my-gpu"}
    kept: dict[str, str] = {}
    for var, argv in commands:
        argv = [kept.get(a.removeprefix("$"), a) if a.startswith("$") else a for a in argv]
        out = await _run(fleet, _stand_in(fleet, argv))
        if var is not None:
            kept[var] = out.strip()

    rows = json.loads(await _run(fleet, ["daemon", "list", "-o", "json"]))["workers"]
    by_name = {w["name"]: w for w in rows}
    prep = [f"prep-0{i}" for i in range(4)]
    assert set(by_name) == {*prep, "train-00", "train-01"}
    assert {by_name[n]["provider"] for n in prep} == {"my-ec2"}
    train = by_name["train-00"]
    assert train["provider"] == "my-gpu" and train["queues"] == ["training-h100"]
    assert train["placement"]["host"] == HOSTS[0]
    assert runs(int(train["placement"]["pid"]), train["id"])
    queue = json.loads(await _run(fleet, ["queues", "show", "training-h100", "-o", "json"]))
    assert (queue["max_depth"], queue["on_full"]) == (1000, "reject")

    stopped = by_name["train-01"]
    await eventually(
        lambda: _status(fleet, stopped["id"]),
        until=lambda status: status in {s.value for s in GONE},
        timeout_s=WAIT_S,
        what="train-01 stopped over ssh",
    )
    pid = int(stopped["placement"]["pid"])
    await eventually(
        lambda: asyncio.to_thread(runs, pid, stopped["id"]),
        until=lambda running: not running,
        timeout_s=WAIT_S,
        what="train-01's process ended",
    )


async def _status(fleet: Any, worker_id: str) -> str:
    return (await fleet.api.get(f"/v1/namespaces/default/workers/{worker_id}"))[1]["status"]


async def test_the_worked_example_as_a_compose_file_comes_up_and_is_then_in_sync(
    fleet, tmp_path, monkeypatch
):
    [text] = _blocks("yaml")
    declared = yaml.safe_load(text)
    assert set(declared["providers"]) == {"my-ec2", "my-gpu"}
    reach = {k: v for k, v in fleet.config().items() if k not in ("hosts", "python", "env")}
    for provider in declared["providers"].values():
        provider["config"].update(reach, hosts=[HOSTS[0]])
    # The file's ``${PWD}/.venv/bin/python`` is this interpreter when PWD is its prefix.
    venv = Path(sys.executable).parents[2]
    monkeypatch.setenv("PWD", str(venv))
    assert (venv / ".venv/bin/python").samefile(sys.executable)
    path = tmp_path / "lakeshore.yaml"
    path.write_text(yaml.safe_dump(declared))

    up = await _run(fleet, ["compose", "up", "-f", str(path), "-p", "demo"])
    assert "+ daemons prep" in up
    rows = json.loads(await _run(fleet, ["daemon", "list", "-o", "json"]))["workers"]
    prep = [w for w in rows if w["name"].startswith("prep-")]
    assert len(prep) == 4 and {w["provider"] for w in prep} == {"my-ec2"}
    assert all(w["placement"].get("host") == HOSTS[0] for w in prep)
    again = await _run(fleet, ["compose", "diff", "-f", str(path), "-p", "demo"])
    assert "no changes" in again or "in sync" in again
