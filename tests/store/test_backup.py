"""Backups against a real control plane: ``POST /v1/backup`` writes the store's rows as
Parquet with a manifest; the offline restore builds a fresh store that a new plane serves
the same, and never leaves a half-restored one."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import natsauth
import pytest
from support import Api, PlaneHandle

from lakeshore.actors.recorder import WaitRecorded
from lakeshore.bus import codec, subjects
from lakeshore.config import ServerSettings
from lakeshore.errors import Forbidden, Invalid, SchemaTooNew, Unavailable
from lakeshore.model import EventBatch, EventType, InvocationEvent
from lakeshore.model.backup import MANIFEST, BackupManifest
from lakeshore.plane import ControlPlane
from lakeshore.sdk import Client
from lakeshore.store import migrations as mig
from lakeshore.store.backup import STORE_FILE, restore, table_digests

WAIT_S = 10.0
#: What a restored plane must answer exactly as the backed-up one did.
PATHS = (
    "/v1/namespaces",
    "/v1/namespaces/bob/queues",
    "/v1/namespaces/bob/providers",
    "/v1/namespaces/bob/providers/edge",
    "/v1/namespaces/bob/jobs",
    "/v1/namespaces/bob/queues/train/stats",
    "/v1/namespaces/bob/queues/train/events",
    "/v1/namespaces/bob/tokens",
)


async def caught_up(plane: ControlPlane, js: Any) -> None:
    last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    async with asyncio.timeout(WAIT_S):
        await (await plane.parts.recorder.ask(WaitRecorded(last)))


async def finish(plane: ControlPlane, js: Any, inv: str, ok: bool) -> None:
    """Publish what a daemon would for a finished attempt of ``inv``."""
    types = (EventType.CLAIMED, EventType.STARTED, EventType.SUCCEEDED if ok else EventType.FAILED)
    events = [
        InvocationEvent(
            namespace="bob",
            queue="train",
            invocation_id=inv,
            ts=datetime.now(UTC),
            type=t,
            attempt=1,
            epoch=1,
            worker="w-1",
            detail={"seq": 1},
        )  # fmt: skip
        for t in types
    ]
    batch = codec.encode(EventBatch(events=events))
    await js.publish(subjects.event_subject("bob", "train"), batch)
    await caught_up(plane, js)


async def seed(handle: PlaneHandle, js: Any) -> tuple[str, list[str]]:
    """Rows of every kind: a namespace, its token, queues, a provider, finished jobs.

    Returns:
        The namespace's token and the jobs' ids.
    """
    async with handle.client() as api:
        await api.post("/v1/namespaces", {"name": "bob", "org": "acme"})
        token = (await api.post("/v1/namespaces/bob/tokens", {}))[1]["token"]
        await api.post("/v1/namespaces/bob/queues", {"name": "train", "max_depth": 50})
        await api.post("/v1/namespaces/bob/queues", {"name": "eval"})
        await api.post("/v1/namespaces/bob/queues/eval/drain")
        status, _ = await api.post(
            "/v1/namespaces/bob/providers",
            {"name": "edge", "kind": "external", "labels": {"site": "lab"}},
        )
        assert status == 201
        body = {"invocations": [{"fn": "builtins:len", "args": [[i]]} for i in range(4)]}
        status, answer = await api.post("/v1/namespaces/bob/queues/train/invocations", body)
        assert status == 202, answer
    ids = answer["ids"]
    await caught_up(handle.plane, js)
    for i, inv in enumerate(ids[:3]):
        await finish(handle.plane, js, inv, ok=i != 1)
    return token, ids


async def answers(api: Api, ids: list[str]) -> dict[str, Any]:
    paths = [*PATHS, *(f"/v1/namespaces/bob/jobs/{inv}" for inv in ids)]
    out = {}
    for path in paths:
        status, body = await api.get(path)
        assert status == 200, (path, body)
        # Ages grow between the two planes' answers; every count must not.
        out[path] = {k: v for k, v in body.items() if not k.endswith("_age_s")}
    return out


def digests(path: Path) -> dict[str, tuple[int, int]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return table_digests(con)
    finally:
        con.close()


@pytest.fixture
async def start_on(nats_server) -> AsyncIterator[Any]:
    """Start a plane on a restored data dir (its admin token is the backed-up one)."""
    started: list[PlaneHandle] = []

    async def start(data_dir: Path, admin_secret: str) -> PlaneHandle:
        settings = ServerSettings(
            data_dir=data_dir, host="127.0.0.1", port=0, nats_url=nats_server.url,
            nats_auth_file=natsauth.secrets_file(),
        )  # fmt: skip
        plane = ControlPlane(settings)
        await plane.start()
        handle = PlaneHandle(plane, admin_secret)
        started.append(handle)
        await plane.serve()
        handle.api = plane.api
        return handle

    try:
        yield start
    finally:
        for handle in started:
            await handle.stop()


async def test_a_restored_backup_answers_the_same_rows_through_the_api(
    plane_factory, js, start_on, tmp_path
) -> None:
    first = await plane_factory()
    token, ids = await seed(first, js)
    async with first.client() as api:
        before = await answers(api, ids)
    archive = tmp_path / "backup.tar"
    async with Client(first.api, first.admin_secret) as client:
        saved = await client.backup(archive)
    assert saved.rows > 0 and saved.bytes == archive.stat().st_size
    await first.stop()

    with tarfile.open(archive) as tar:
        raw = tar.extractfile(MANIFEST)
        assert raw is not None
        manifest = msgspec.json.decode(raw.read(), type=BackupManifest)
        parquet = [n for n in tar.getnames() if n.endswith(".parquet")]
    assert manifest.schema_version == len(mig.MIGRATIONS) == saved.schema_version
    assert len(manifest.tables) == saved.tables and len(parquet) == saved.tables
    assert manifest.tables["queues"] == 3 and manifest.tables["providers"] == 1
    events, state = manifest.streams
    assert events.stream == subjects.EVENTS_STREAM
    assert 0 < events.covered_seq <= events.last_seq
    # The rows' log: the file had applied it up to there (queues, providers… are in it).
    assert state.stream == subjects.STATE_STREAM and state.covered_seq > 0

    new_dir = tmp_path / "restored"
    done = restore(archive, new_dir)
    assert done.moved_aside is None and done.tables == manifest.tables
    assert digests(new_dir / STORE_FILE) == digests(first.data_dir / STORE_FILE)

    second = await start_on(new_dir, first.admin_secret)
    async with second.client() as api:
        assert await answers(api, ids) == before
        status, _ = await api.request("GET", "/v1/namespaces/bob/queues", token=token)
        assert status == 200
    result = before[f"/v1/namespaces/bob/jobs/{ids[0]}"]
    assert result["state"] == "succeeded"


async def test_only_an_admin_token_may_take_a_backup(plane_factory, js, tmp_path) -> None:
    handle = await plane_factory()
    token, _ = await seed(handle, js)
    dest = tmp_path / "nope.tar"
    async with Client(handle.api, token, "bob") as client:
        with pytest.raises(Forbidden):
            await client.backup(dest)
    assert not dest.exists()


def _archive(tmp_path: Path, manifest: BackupManifest, files: dict[str, bytes]) -> Path:
    path = tmp_path / "forged.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in {MANIFEST: msgspec.json.encode(manifest), **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _old_store(data_dir: Path) -> bytes:
    data_dir.mkdir(parents=True)
    con = duckdb.connect(str(data_dir / STORE_FILE))
    con.execute("CREATE TABLE marker (v INTEGER)")
    con.execute("INSERT INTO marker VALUES (42)")
    con.close()
    return (data_dir / STORE_FILE).read_bytes()


def _manifest(**kw: Any) -> BackupManifest:
    base: dict[str, Any] = {
        "lakeshore_version": "9.9.9",
        "schema_version": 1,
        "created_at": datetime.now(UTC),
        "tables": {"t": 1},
    }
    return BackupManifest(**{**base, **kw})


def test_a_backup_from_a_newer_schema_is_refused_and_nothing_changes(tmp_path) -> None:
    data_dir = tmp_path / "data"
    old = _old_store(data_dir)
    archive = _archive(tmp_path, _manifest(schema_version=len(mig.MIGRATIONS) + 1), {})
    with pytest.raises(SchemaTooNew, match="upgrade lakeshore"):
        restore(archive, data_dir)
    assert (data_dir / STORE_FILE).read_bytes() == old
    assert sorted(p.name for p in data_dir.iterdir()) == [STORE_FILE]


def test_a_damaged_backup_leaves_the_old_store_as_it_was(tmp_path) -> None:
    data_dir = tmp_path / "data"
    old = _old_store(data_dir)
    files = {
        "db/schema.sql": b"CREATE TABLE t (v INTEGER);\n",
        "db/load.sql": b"COPY t FROM 'db/t.parquet' (FORMAT 'parquet');\n",
        "db/t.parquet": b"not parquet",
    }
    with pytest.raises(Unavailable, match="cannot import the backup"):
        restore(_archive(tmp_path, _manifest(), files), data_dir)
    assert (data_dir / STORE_FILE).read_bytes() == old
    assert sorted(p.name for p in data_dir.iterdir()) == [STORE_FILE]


def test_a_file_that_is_no_backup_is_refused(tmp_path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"hello")
    with pytest.raises(Invalid, match="not a lakeshore backup"):
        restore(junk, tmp_path / "data")
