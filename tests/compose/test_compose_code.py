"""A compose file's ``code:`` (spec/code.md): `compose up` ships a queue's directory as its
snapshot, the queue's invocations that name no code run in it, `compose diff` sees an edit
as a change of the queue's code, and the snapshot is kept while the queue names it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from composing import plan_lines
from support import stored_invocations

from lakeshore.cli.compose import CHANGES_PENDING
from lakeshore.cli.exits import API_ERROR
from lakeshore.code import pack

NS = "default"
BASE = f"/v1/namespaces/{NS}"
FILE = """
    queues:
      shipped: {code: ./src}
      plain: {}
"""


def _src(project: Path, factor: int) -> Path:
    src = project / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "tasks.py").write_text(f"def double(x):\n    return {factor} * x\n")
    return src


async def test_up_ships_a_queues_code_and_its_invocations_run_in_it(
    cli, compose_file, project_dir, api, js, control_plane
):
    src = _src(project_dir, 2)
    compose_file(FILE)
    digest = pack(src).digest
    diff = await cli("compose", "diff", expect=CHANGES_PENDING)
    assert (await api.get(f"{BASE}/code/{digest}"))[0] == 404  # diff ships nothing
    assert "+ queue shipped (fifo, fixed)" in plan_lines(diff.stdout)
    await cli("compose", "up")
    queue = (await api.get(f"{BASE}/queues/shipped"))[1]
    assert queue["code"] == digest and (await api.get(f"{BASE}/queues/plain"))[1]["code"] is None
    assert (await api.get(f"{BASE}/code/{digest}"))[1]["queues"] == 1
    await cli("compose", "diff")  # in sync: exit 0

    # Invocations that name no code run in the queue's; one that names its own keeps it;
    # an inline function runs in the daemon's own process: none.
    other = pack(_src(project_dir / "other", 5))
    status, _ = await api.request("PUT", f"{BASE}/code/{other.digest}", data=other.data)
    assert status == 201
    specs = [
        {"fn": "tasks:double", "args": [1]},
        {"command": ["cat", "tasks.py"]},
        {"fn": "tasks:double", "code": other.digest},
        {"fn": "tasks:double", "isolation": "inline"},
    ]
    status, body = await api.post(f"{BASE}/queues/shipped/invocations", {"invocations": specs})
    assert status == 202, body
    assert [i.code for i in await stored_invocations(js, NS, "shipped")] == [
        digest,
        digest,
        other.digest,
        None,
    ]
    job = (await api.get(f"{BASE}/jobs/{body['ids'][0]}"))[1]
    assert job["code"] == digest

    # An edit is a new snapshot: diff shows the queue's code changing, up ships it.
    _src(project_dir, 3)
    edited = pack(src).digest
    diff = await cli("compose", "diff", expect=CHANGES_PENDING)
    assert "~ queue shipped" in diff.stdout and "code" in diff.stdout and edited in diff.stdout
    await cli("compose", "up")
    assert (await api.get(f"{BASE}/queues/shipped"))[1]["code"] == edited

    # The retention keeps what a queue names, whatever its age; the replaced one goes once
    # its jobs are over.
    for inv_id in body["ids"]:
        await api.post(f"{BASE}/jobs/{inv_id}/cancel")
    code = control_plane.plane.parts.services.code
    later = datetime.now(UTC) + timedelta(days=8)
    deleted = {d for _, d in await code.prune(later)}
    assert edited not in deleted and (await api.get(f"{BASE}/code/{edited}"))[0] == 200


async def test_a_queues_code_must_be_uploaded_first(api, tmp_path: Path):
    missing = "sha256:" + "1" * 64
    status, body = await api.post(f"{BASE}/queues", {"name": "q", "code": missing})
    assert status == 404 and body["error"]["code"] == "snapshot_not_found", body
    assert (await api.get(f"{BASE}/queues/q"))[0] == 404
    assert (await api.post(f"{BASE}/queues", {"name": "q"}))[0] == 201
    status, body = await api.patch(f"{BASE}/queues/q", {"code": missing})
    assert status == 404, body
    assert (await api.get(f"{BASE}/queues/q"))[1]["code"] is None


async def test_up_sets_a_queues_default_resources_and_diff_sees_an_edit(cli, compose_file, api):
    compose_file("""
        queues:
          training-h100: {defaults: {resources: {gpus: 1, gpu_type: H100}}}
    """)
    await cli("compose", "up")
    queue = (await api.get(f"{BASE}/queues/training-h100"))[1]
    assert queue["defaults"] == {"resources": {"gpus": 1, "gpu_type": "H100"}}
    await cli("compose", "diff")  # in sync: exit 0
    compose_file("""
        queues:
          training-h100: {defaults: {resources: {gpus: 2, gpu_type: H100}}}
    """)
    diff = await cli("compose", "diff", expect=CHANGES_PENDING)
    assert "~ queue training-h100" in diff.stdout and "defaults" in diff.stdout, diff.stdout
    await cli("compose", "up")
    queue = (await api.get(f"{BASE}/queues/training-h100"))[1]
    assert queue["defaults"]["resources"]["gpus"] == 2


async def test_a_bad_default_request_is_refused_before_anything_changes(cli, compose_file, api):
    compose_file("""
        queues:
          fine: {}
          training-h100: {defaults: {resources: {gpus: 65}}}
    """)
    result = await cli("compose", "up", expect=API_ERROR)
    assert "queue training-h100: defaults: resources.gpus must be between 0 and 64" in (
        result.output
    ), result.output
    assert (await api.get(f"{BASE}/queues/fine"))[0] == 404
