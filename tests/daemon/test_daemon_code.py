"""Shipped code (spec/code.md): a daemon with no copy of the project runs a function and a
command from the invocation's snapshot; a new digest runs the new code while the old
attempt keeps its own; a snapshot that cannot be fetched fails the attempt, never falls back
to local code; an import error says where it looked and how to ship code — a real control
plane, real daemons, real worker processes."""

from __future__ import annotations

import socket
from pathlib import Path

from daemon_support import NS, command
from natsauth import plane_nats

from lakeshore.bus import subjects
from lakeshore.code import pack

J = f"/v1/namespaces/{NS}/jobs"
CODE = f"/v1/namespaces/{NS}/code"


def _project(root: Path, factor: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    # A module name no other test ships or has on the path: only the snapshot holds it.
    (root / "shipped_tasks.py").write_text(
        "import os\n\n"
        f"def double(x):\n    return {factor} * x\n\n"
        "def where():\n    return [os.getcwd(), open('data.txt').read().strip()]\n"
    )
    (root / "data.txt").write_text(f"data of {factor}\n")
    return root


async def _ship(api, root: Path) -> str:
    snap = pack(root)
    status, body = await api.request("PUT", f"{CODE}/{snap.digest}", data=snap.data)
    assert status in (200, 201), body
    return snap.digest


async def _finished(bench, inv_id: str) -> dict:
    await bench.job_state(inv_id, "succeeded")
    return (await bench.api.get(f"{J}/{inv_id}"))[1]


async def test_a_daemon_without_the_project_runs_its_function_and_command_from_the_snapshot(
    bench, daemons, tmp_path: Path
) -> None:
    q = await bench.queue("shipped")
    digest = await _ship(bench.api, _project(tmp_path / "proj", 2))
    cache = tmp_path / "cache"
    await daemons.start("far", queues=[q], code_cache=cache)
    fn_id, where_id, cmd_id = await bench.submit(
        q,
        {"fn": "shipped_tasks:double", "args": [21], "code": digest},
        {"fn": "shipped_tasks:where", "code": digest},
        command("sh", "-c", 'cat data.txt; echo "$LAKESHORE_CODE"', code=digest),
    )
    job = await _finished(bench, fn_id)
    assert (await bench.result(fn_id, 1)).value == 42
    assert job["code"] == digest and job["attempts"][0]["code"] == digest
    await _finished(bench, where_id)
    entry = cache / digest.removeprefix("sha256:")
    assert (await bench.result(where_id, 1)).value == [str(entry), "data of 2"]
    await _finished(bench, cmd_id)
    assert (await bench.result(cmd_id, 1)).output == f"data of 2\n{digest}\n"


async def test_an_edited_module_is_a_new_digest_and_the_old_attempt_keeps_its_own(
    bench, daemons, tmp_path: Path
) -> None:
    q = await bench.queue("edited")
    root = _project(tmp_path / "proj", 2)
    old = await _ship(bench.api, root)
    await daemons.start("far", queues=[q], code_cache=tmp_path / "cache")
    [first] = await bench.submit(q, {"fn": "shipped_tasks:double", "args": [5], "code": old})
    await _finished(bench, first)
    _project(root, 3)  # the user edits the module and submits again
    new = await _ship(bench.api, root)
    assert new != old
    [second] = await bench.submit(q, {"fn": "shipped_tasks:double", "args": [5], "code": new})
    job = await _finished(bench, second)
    assert (await bench.result(first, 1)).value == 10
    assert (await bench.result(second, 1)).value == 15  # the same daemon, the new code
    assert job["attempts"][0]["code"] == new
    earlier = (await bench.api.get(f"{J}/{first}"))[1]
    assert earlier["attempts"][0]["code"] == old


async def test_a_snapshot_that_cannot_be_fetched_fails_the_attempt_never_runs_local_code(
    bench, daemons, nats_server, tmp_path: Path
) -> None:
    q = await bench.queue("unfetched")
    digest = await _ship(bench.api, _project(tmp_path / "proj", 2))
    [inv_id] = await bench.submit(q, {"fn": "shipped_tasks:double", "args": [1], "code": digest})
    nc = await plane_nats(nats_server.url)  # the bucket is lost after the submit
    try:
        await nc.jetstream().purge_stream(subjects.code_stream(NS))
    finally:
        await nc.close()
    await daemons.start("far", queues=[q], code_cache=tmp_path / "cache")
    await bench.job_state(inv_id, "failed")
    job = (await bench.api.get(f"{J}/{inv_id}"))[1]
    error = job["attempts"][0]["error"]
    assert error["type"] == "lakeshore.CodeUnavailable", error
    assert f"code snapshot {digest} could not be fetched to this host" in error["message"]
    assert "is not stored in org default" in error["message"]


async def test_an_import_error_says_where_it_looked_and_how_to_ship_code(
    bench, daemons, tmp_path: Path
) -> None:
    q = await bench.queue("unimported")
    digest = await _ship(bench.api, _project(tmp_path / "proj", 2))
    await daemons.start("far", queues=[q], code_cache=tmp_path / "cache")
    shipped, unshipped = await bench.submit(
        q,
        {"fn": "not_in_the_snapshot:f", "code": digest},
        {"fn": "shipped_tasks:double", "args": [1]},  # no code: the daemon's own path
    )
    for inv_id in (shipped, unshipped):
        await bench.job_state(inv_id, "failed")
    entry = str(tmp_path / "cache" / digest.removeprefix("sha256:"))
    for inv_id, where, code in (
        (shipped, entry, f"code {digest}"),
        (unshipped, None, "no code shipped"),
    ):
        error = (await bench.api.get(f"{J}/{inv_id}"))[1]["attempts"][0]["error"]
        message = error["message"]  # as the attempt shows it: its first 1,000 characters
        assert error["type"] == "builtins.ModuleNotFoundError", error
        assert f"on host {socket.gethostname()} with {code}" in message
        assert "lakeshore submit --code DIR" in message
        if where is not None:
            assert f"in working directory {where}." in message
        whole = (await bench.result(inv_id, 1)).error
        assert whole is not None and "sys.path: [" in whole.message
