"""Uploading code snapshots (spec/code.md): once per digest into the org's Object Store
bucket, checked whole before anything is stored, and the submit's check that what it names
is stored — a real control plane, real NATS, real directories."""

from __future__ import annotations

import asyncio
import io
import tarfile
from pathlib import Path

import msgspec
import nats.js.errors

from lakeshore.bus import subjects
from lakeshore.code import pack
from lakeshore.code.snapshot import digest_of
from lakeshore.model import Invocation
from lakeshore.sdk import Client, configure, sync
from lakeshore.sdk.code import Shipper
from lakeshore.sdk.udf import udf

NS = "default"
CODE = f"/v1/namespaces/{NS}/code"
Q = f"/v1/namespaces/{NS}/queues"


def _project(root: Path, value: int = 2) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tasks.py").write_text(f"def double(x):\n    return {value} * x\n")
    (root / "data.txt").write_text("forty-two\n")
    return root


async def _objects(js, org: str = "default") -> int:
    """How many snapshots the org's bucket holds (its meta messages; no bucket: none)."""
    try:
        info = await js.stream_info(subjects.code_stream(org), subjects_filter="$O.*.M.>")
    except nats.js.errors.NotFoundError:
        return 0
    return len(info.state.subjects or {})


async def _put(api, digest: str, data: bytes, ns: str = NS) -> tuple[int, object]:
    return await api.request("PUT", f"/v1/namespaces/{ns}/code/{digest}", data=data)


async def test_a_snapshot_is_stored_once_and_shown(api, js, tmp_path: Path) -> None:
    snap = pack(_project(tmp_path / "proj"))
    status, body = await _put(api, snap.digest, snap.data)
    assert status == 201, body
    assert (body["digest"], body["size"], body["files"]) == (snap.digest, snap.size, 2)
    again = await _put(api, snap.digest, snap.data)
    assert again[0] == 200 and again[1]["digest"] == snap.digest
    shown = await api.get(f"{CODE}/{snap.digest}")
    assert shown[0] == 200 and shown[1]["size"] == snap.size
    assert await _objects(js) == 1


async def test_a_sibling_namespace_of_the_org_reaches_its_snapshots(api, tmp_path: Path) -> None:
    assert (await api.post("/v1/namespaces", {"name": "sibling", "org": "default"}))[0] == 201
    snap = pack(_project(tmp_path / "proj"))
    assert (await _put(api, snap.digest, snap.data))[0] == 201
    assert (await api.get(f"/v1/namespaces/sibling/code/{snap.digest}"))[0] == 200


async def test_bad_uploads_are_refused_and_store_nothing(api, js, tmp_path: Path) -> None:
    snap = pack(_project(tmp_path / "proj"))
    other = pack(_project(tmp_path / "other", value=3))
    cases = {
        "another digest": (other.digest, snap.data, 400, "does not match its digest"),
        "not a digest": ("sha256:XYZ", snap.data, 400, "not a snapshot's digest"),
        "empty": (snap.digest, b"", 400, "is empty"),
        "not a tar": (digest_of(b"hello"), b"hello", 400, "not a tar"),
    }
    for case, (digest, data, want, says) in cases.items():
        status, body = await _put(api, digest, data)
        assert status == want, (case, body)
        assert says in body["error"]["message"], (case, body)
    # An entry that is not a plain file under the top (a link, an escape) is refused.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    status, body = await _put(api, digest_of(buf.getvalue()), buf.getvalue())
    assert status == 400 and "unexpected entry 'escape'" in body["error"]["message"], body
    assert (await api.get(f"{CODE}/{snap.digest}"))[0] == 404
    assert await _objects(js) == 0


async def test_a_snapshot_over_the_bounds_is_413_naming_its_largest_files(
    plane_factory, js, tmp_path: Path
) -> None:
    handle = await plane_factory(code_max_bytes=64 * 1024, code_max_files=3)
    root = _project(tmp_path / "proj")
    (root / "weights.bin").write_bytes(b"\0" * 100 * 1024)
    big = pack(root)
    (root / "weights.bin").write_bytes(b"\0" * 1024 * 1024)
    huge = pack(root)
    many = _project(tmp_path / "many")
    for i in range(3):
        (many / f"m{i}.py").write_text("")
    crowd = pack(many)
    async with handle.client() as api:
        status, body = await _put(api, big.digest, big.data)
        assert status == 413, body
        message = body["error"]["message"]
        assert body["error"]["code"] == "snapshot_too_large"
        assert "over code_max_bytes 64.0 KiB" in message and "weights.bin (100.0 KiB)" in message
        status, body = await _put(api, crowd.digest, crowd.data)
        assert status == 413 and "over code_max_files 3" in body["error"]["message"], body
        # Far over the bounds: refused by its length, before it is read.
        status, body = await _put(api, huge.digest, huge.data)
        assert status == 413 and "far over code_max_bytes" in body["error"]["message"], body
        for snap in (big, crowd, huge):
            assert (await api.get(f"{CODE}/{snap.digest}"))[0] == 404


async def test_a_submit_naming_code_not_uploaded_is_refused_whole(api, js, tmp_path) -> None:
    assert (await api.post(Q, {"name": "q"}))[0] == 201
    snap = pack(_project(tmp_path / "proj"))
    batch = {"invocations": [{"fn": "tasks:double", "args": [1], "code": snap.digest}] * 2}
    status, body = await api.post(f"{Q}/q/invocations", batch)
    assert status == 404 and "is not uploaded to this org" in body["error"]["message"], body
    assert body["error"]["code"] == "snapshot_not_found"
    assert (await js.stream_info(subjects.queue_stream(NS, "q"))).state.messages == 0
    bad = {"fn": "tasks:double", "code": "sha256:nothex"}
    status, body = await api.post(f"{Q}/q/invocations", bad)
    assert status == 400 and "$.code" in body["error"]["message"], body

    assert (await _put(api, snap.digest, snap.data))[0] == 201
    status, body = await api.post(f"{Q}/q/invocations", batch)
    assert status == 202, body
    msg = await js.get_msg(subjects.queue_stream(NS, "q"), 1)
    assert b'"code":"' + snap.digest.encode() + b'"' in msg.data


class Counting(Client):
    """A real client that counts the snapshots it asked for and uploaded."""

    asked = uploads = 0

    def code_info(self, digest: str, **kw):  # type: ignore[no-untyped-def]
        self.asked += 1
        return super().code_info(digest, **kw)

    async def upload_code(self, snap, **kw):  # type: ignore[no-untyped-def]
        self.uploads += 1
        return await super().upload_code(snap, **kw)


async def test_the_shipper_packs_once_per_change_and_uploads_once(
    control_plane, js, tmp_path: Path
) -> None:
    root = _project(tmp_path / "proj")
    shipper = Shipper()
    async with Counting(control_plane.api, control_plane.admin_token) as client:
        digests = await asyncio.gather(*(shipper.ship(client, root, None) for _ in range(200)))
        assert len(set(digests)) == 1
        assert (client.asked, client.uploads) == (1, 1)  # 200 submits racing: one upload
        first = shipper.snapshot(root)
        assert shipper.snapshot(root) is first  # nothing changed: not packed again
        assert await _objects(js) == 1
        (root / "tasks.py").write_text("def double(x):\n    return 3 * x\n")
        changed = await shipper.ship(client, root, None)
        assert changed != digests[0]
        assert await _objects(js) == 2


async def test_a_udf_with_code_submits_its_snapshots_digest(
    control_plane, api, js, tmp_path: Path, monkeypatch
) -> None:
    assert (await api.post(Q, {"name": "q"}))[0] == 201
    root = _project(tmp_path / "proj")
    monkeypatch.chdir(root)
    client = Client(control_plane.api, control_plane.admin_token)
    configure(client, code=".")  # "." is the directory current now
    monkeypatch.chdir(tmp_path)
    try:
        shipped = udf(_project_fn, queue="q")
        other = udf(_project_fn, queue="q", code=_project(tmp_path / "other", value=3))
        await shipped.asubmit(1)
        await other.asubmit(1)
    finally:
        configure()
        sync.close()
    stream = subjects.queue_stream(NS, "q")
    first, second = [
        msgspec.json.decode((await js.get_msg(stream, seq)).data, type=Invocation) for seq in (1, 2)
    ]
    assert first.code == pack(root).digest
    assert second.code == pack(tmp_path / "other").digest
    assert await _objects(js) == 2


def _project_fn(x: int) -> int:
    return 2 * x
