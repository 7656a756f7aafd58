"""``lakeshore backup`` and ``lakeshore restore`` as a user's shell runs them: a backup of a
real control plane, restored offline into a new data dir and over an existing store, and
the refusals (a namespace's token, a store in use, a backup from a newer Lakeshore)."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import msgspec
import pytest
from clirunner import Invoke

from lakeshore.model.backup import MANIFEST, BackupManifest
from lakeshore.store import migrations as mig
from lakeshore.store.backup import STORE_FILE

WAIT_S = 10.0


async def take_backup(control_plane, cli: Invoke, tmp_path: Path) -> Path:
    async with control_plane.client() as api:
        assert (await api.post("/v1/namespaces/default/queues", {"name": "kept"}))[0] == 201
    archive = tmp_path / "b.tar"
    result = await cli("backup", "--to", str(archive))
    assert result.stdout.startswith("wrote ") and f"bytes to {archive}" in result.stdout
    assert f"{archive.stat().st_size} bytes" in result.stdout
    return archive


async def test_backup_then_restore_into_a_new_and_an_existing_data_dir(
    cli: Invoke, control_plane, tmp_path
) -> None:
    archive = await take_backup(control_plane, cli, tmp_path)
    await control_plane.stop()
    fresh = tmp_path / "fresh"
    result = await cli("restore", str(archive), "--data-dir", str(fresh))
    assert f"into {fresh / STORE_FILE}" in result.stdout
    assert "  queues: 1\n" in result.stdout and "stream LS_EVENTS" in result.stdout
    assert "moved" not in result.stdout

    again = await cli("restore", str(archive), "--data-dir", str(fresh))
    [aside] = fresh.glob(f"{STORE_FILE}.before-restore-*")
    assert f"the previous store was moved to {aside}" in again.stdout
    assert (fresh / STORE_FILE).exists()


async def test_a_namespace_token_may_not_take_a_backup(cli: Invoke, control_plane, tmp_path):
    async with control_plane.client() as api:
        token = (await api.post("/v1/namespaces/default/tokens", {}))[1]["token"]
    dest = tmp_path / "b.tar"
    result = await cli("--token", token, "backup", "--to", str(dest), expect=1)
    assert "only an admin token may take a backup" in result.stderr
    assert not dest.exists()


async def test_restore_refuses_a_store_in_use(cli: Invoke, control_plane, tmp_path) -> None:
    archive = await take_backup(control_plane, cli, tmp_path)
    busy = tmp_path / "busy"
    busy.mkdir()
    holder = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); sys.stdin.read()"  # noqa: E501
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", holder, str(busy / STORE_FILE),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdin is not None
        async with asyncio.timeout(WAIT_S):
            assert await proc.stdout.readline() == b"ready\n"
        before = sorted(p.name for p in busy.iterdir())
        result = await cli("restore", str(archive), "--data-dir", str(busy), expect=1)
        assert "is in use by another process" in result.stderr
        assert sorted(p.name for p in busy.iterdir()) == before
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        async with asyncio.timeout(WAIT_S):
            await proc.wait()


async def test_restore_refuses_a_backup_from_a_newer_schema(
    cli: Invoke, control_plane, tmp_path
) -> None:
    archive = await take_backup(control_plane, cli, tmp_path)
    with tarfile.open(archive) as tar:
        raw = tar.extractfile(MANIFEST)
        assert raw is not None
        manifest = msgspec.json.decode(raw.read(), type=BackupManifest)
    newer = msgspec.structs.replace(manifest, schema_version=len(mig.MIGRATIONS) + 1)
    forged = tmp_path / "newer.tar"
    with tarfile.open(archive) as src, tarfile.open(forged, "w") as dst:
        for member in src.getmembers():
            if member.name == MANIFEST:
                data = msgspec.json.encode(newer)
                member.size = len(data)
                dst.addfile(member, io.BytesIO(data))
            else:
                dst.addfile(member, src.extractfile(member))
    target = tmp_path / "target"
    result = await cli("restore", str(forged), "--data-dir", str(target), expect=1)
    assert f"schema version {len(mig.MIGRATIONS) + 1}" in result.stderr
    assert "upgrade lakeshore" in result.stderr
    assert not (target / STORE_FILE).exists()


@pytest.mark.parametrize("name", ["backup", "restore"])
async def test_backup_commands_are_listed(cli: Invoke, name: str) -> None:
    assert name in (await cli("--help")).stdout
