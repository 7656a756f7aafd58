"""The org's code snapshots listed and shown with the jobs that use them, and their
retention (spec/code.md) — a real control plane, real NATS, real jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
from clirunner import cli_for
from polling import eventually

from lakeshore.code import pack
from lakeshore.model import Invocation
from lakeshore.sdk import Client, configure, sync
from lakeshore.sdk.udf import udf

NS = "default"
CODE = f"/v1/namespaces/{NS}/code"
Q = f"/v1/namespaces/{NS}/queues"


async def _snapshot(api, root: Path, body: str) -> str:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tasks.py").write_text(body)
    snap = pack(root)
    status, answer = await api.request("PUT", f"{CODE}/{snap.digest}", data=snap.data)
    assert status in (200, 201), answer
    return snap.digest


async def test_code_ls_and_show_name_each_snapshot_with_the_jobs_that_use_it(
    control_plane, api, tmp_path: Path, monkeypatch
) -> None:
    assert (await api.post(Q, {"name": "q"}))[0] == 201
    used = await _snapshot(api, tmp_path / "a", "X = 1\n")
    idle = await _snapshot(api, tmp_path / "b", "X = 2\n")
    jobs = [{"fn": "tasks:f", "code": used}] * 3
    status, body = await api.post(f"{Q}/q/invocations", {"invocations": jobs})
    assert status == 202, body
    status, body = await api.post(f"/v1/namespaces/{NS}/jobs/{body['ids'][0]}/cancel")
    assert status == 200, body

    async def listed() -> dict[str, dict]:
        return {s["digest"]: s for s in (await api.get(CODE))[1]["snapshots"]}

    shown = await eventually(
        listed, until=lambda s: s.get(used, {}).get("unfinished") == 2, timeout_s=10,
        what="the jobs recorded",
    )  # fmt: skip
    assert list(shown) == [used, idle]  # the most recently used first
    assert (shown[used]["jobs"], shown[used]["size"], shown[used]["files"]) == (3, 6, 1)
    assert shown[idle]["jobs"] == 0 and shown[idle]["last_used"] is None
    monkeypatch.chdir(tmp_path)
    cli = cli_for(control_plane)
    table = (await cli("code", "ls")).stdout.splitlines()
    assert table[0].split()[:5] == ["DIGEST", "SIZE", "FILES", "JOBS", "UNFINISHED"]
    assert table[1].split()[:6] == [used[:19], "6", "B", "1", "3", "2"]
    block = (await cli("code", "show", used[7:19])).stdout  # a prefix, without sha256:
    assert f"digest:     {used}" in block and "jobs:       3 (2 not finished)" in block
    missing = await cli("code", "show", "ffff", expect=1)
    assert "no code snapshot of this org starts with 'ffff'" in missing.stderr


async def test_an_unused_snapshot_is_deleted_after_the_retention_and_a_pending_jobs_kept(
    plane_factory, tmp_path: Path
) -> None:
    handle = await plane_factory(code_retention_days=1 / 86400, code_prune_every_s=0.2)
    async with handle.client() as api:
        assert (await api.post(Q, {"name": "q"}))[0] == 201
        kept = await _snapshot(api, tmp_path / "a", "X = 1\n")
        gone = await _snapshot(api, tmp_path / "b", "X = 2\n")
        status, body = await api.post(f"{Q}/q/invocations", {"fn": "tasks:f", "code": kept})
        assert status == 202, body
        [job] = body["ids"]

        async def status_of(digest: str) -> int:
            return (await api.get(f"{CODE}/{digest}"))[0]

        await eventually(lambda: status_of(gone), until=lambda s: s == 404, timeout_s=15,
                         what="the unused snapshot deleted")  # fmt: skip
        assert await status_of(kept) == 200  # a pending job names it
        assert (await api.post(f"/v1/namespaces/{NS}/jobs/{job}/cancel"))[0] == 200
        await eventually(
            lambda: status_of(kept), until=lambda s: s == 404, timeout_s=15,
            what="its job finished, the snapshot deleted after the retention",
        )  # fmt: skip


async def test_the_sdk_uploads_a_snapshot_again_once_the_retention_deleted_it(
    control_plane, api, js, tmp_path: Path
) -> None:
    assert (await api.post(Q, {"name": "q"}))[0] == 201
    root = tmp_path / "proj"
    root.mkdir()
    (root / "tasks.py").write_text("def f():\n    return 1\n")
    configure(Client(control_plane.api, control_plane.admin_token))
    try:
        shipped = udf(_f, queue="q", code=root)
        first = await shipped.asubmit()
        status, body = await api.post(f"/v1/namespaces/{NS}/jobs/{first.id}/cancel")
        assert status == 200, body
        # The retention, a week on: its one job is over, so the snapshot goes.
        code = control_plane.plane.parts.services.code
        later = datetime.now(UTC) + timedelta(days=8)
        await eventually(lambda: code.prune(later), until=bool, timeout_s=10, what="pruned")
        assert (await api.get(f"{CODE}/{pack(root).digest}"))[0] == 404
        second = await shipped.asubmit()  # refused (404), uploaded again, submitted
    finally:
        configure()
        sync.close()
    assert first.id != second.id
    assert (await api.get(f"{CODE}/{pack(root).digest}"))[0] == 200
    info = await js.stream_info("LS_default_q")  # the first was cancelled: the second alone
    assert (info.state.messages, info.state.last_seq) == (1, 2)
    msg = await js.get_msg("LS_default_q", 2)
    assert msgspec.json.decode(msg.data, type=Invocation).code == pack(root).digest


def _f() -> int:
    return 1
