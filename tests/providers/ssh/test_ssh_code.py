"""Shipped code over the ssh provider (spec/code.md): a daemon started on 127.0.0.2, in
another HOME and working directory with no copy of the project and nothing of it on its
path, runs a function and a command of the invocation's snapshot."""

from __future__ import annotations

from pathlib import Path

from ssh_fleet import BASE, UP
from sshd import HOSTS

from lakeshore.sdk import Client
from lakeshore.sdk.code import Shipper


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "far_tasks.py").write_text(
        "import os\n\ndef double(x):\n    return 2 * x\n\ndef where():\n    return os.getcwd()\n"
    )
    (root / "inputs").mkdir()
    (root / "inputs" / "data.txt").write_text("read from the snapshot\n")
    return root


async def test_an_ssh_daemon_without_the_project_runs_shipped_code(fleet, tmp_path: Path) -> None:
    far = HOSTS[1]
    await fleet.add_provider(hosts=[far], env={})  # nothing of the tests on its path
    await fleet.queue("far")
    [wid] = await fleet.launch("far", ["far"])
    worker = await fleet.wait_worker(wid, UP, placed=True)
    assert worker.placement["host"] == far
    handle = fleet.handle
    async with Client(handle.api, handle.admin_token) as client:
        digest = await Shipper().ship(client, _project(tmp_path / "proj"), None)
    specs = [
        {"fn": "far_tasks:double", "args": [21], "code": digest},
        {"fn": "far_tasks:where", "code": digest},
        {"command": ["cat", "inputs/data.txt"], "code": digest},
    ]
    ids = (await fleet.post("/queues/far/invocations", {"invocations": specs}))["ids"]
    await fleet.wait_jobs(ids)
    results = [(await fleet.api.get(f"{BASE}/jobs/{i}/result"))[1] for i in ids]
    # Fetched into the far host's own HOME, and run there.
    entry = fleet.sshd.homes[far] / ".cache/lakeshore/code" / digest.removeprefix("sha256:")
    assert [results[0]["value"], results[1]["value"]] == [42, str(entry)]
    assert results[2]["output"] == "read from the snapshot\n"
    for i in ids:
        job = (await fleet.api.get(f"{BASE}/jobs/{i}"))[1]
        assert (job["worker"], job["attempts"][0]["code"]) == (wid, digest)
