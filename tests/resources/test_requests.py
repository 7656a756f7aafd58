"""Resource requests (spec/resources.md): what an invocation asks of its daemon's machine,
from HTTP, the SDK and the CLI; bad requests refused at the edge naming the field and its
range, nothing submitted; the job and its retry keep the request."""

from __future__ import annotations

import pytest
from clirunner import cli_for
from support import stored_invocations

from lakeshore.cli.exits import API_ERROR
from lakeshore.model import Resources, memory_bytes
from lakeshore.sdk import Client, configure, sync
from lakeshore.sdk.udf import udf

NS = "default"
BASE = f"/v1/namespaces/{NS}"


def test_memory_takes_binary_units_and_needs_one() -> None:
    assert memory_bytes("16G") == memory_bytes("16Gi") == memory_bytes("16GiB") == 16 * 1024**3
    assert memory_bytes("512m") == 512 * 1024**2 and memory_bytes("1.5T") == int(1.5 * 1024**4)
    for bad in ("16", "16X", "G", "-1G", ""):
        with pytest.raises(Exception, match="must be a number and a unit"):
            memory_bytes(bad)


async def test_a_request_is_stored_shown_and_kept_by_a_retry(api, js) -> None:
    assert (await api.post(f"{BASE}/queues", {"name": "gpu"}))[0] == 201
    asked = {"gpus": 2, "gpu_type": "H100", "cpus": 8, "memory": "64G"}
    status, body = await api.post(
        f"{BASE}/queues/gpu/invocations", {"command": ["true"], "resources": asked}
    )
    assert status == 202, body
    [job_id] = body["ids"]
    [stored] = await stored_invocations(js, NS, "gpu")
    assert stored.resources == Resources(gpus=2, gpu_type="H100", cpus=8, memory="64G")
    job = (await api.get(f"{BASE}/jobs/{job_id}"))[1]
    assert job["resources"] == asked
    assert (await api.post(f"{BASE}/jobs/{job_id}/cancel"))[0] == 200
    status, retry = await api.post(f"{BASE}/jobs/{job_id}/retry")
    assert status == 202, retry
    shown = (await api.get(f"{BASE}/jobs/{retry['id']}"))[1]
    assert shown["resources"] == asked


@pytest.mark.parametrize(
    ("resources", "says"),
    [
        ({"gpus": -1}, "resources.gpus must be between 0 and 64 (got -1)"),
        ({"gpus": 65}, "resources.gpus must be between 0 and 64 (got 65)"),
        ({"gpus": "two"}, "$.resources.gpus"),
        ({"cpus": 0}, "resources.cpus must be more than 0 and at most 1024 (got 0)"),
        ({"cpus": 5000}, "resources.cpus must be more than 0 and at most 1024 (got 5000)"),
        ({"memory": "16"}, "resources.memory '16' must be a number and a unit"),
        ({"memory": "100T"}, "resources.memory must be more than 0 and at most 64T"),
        ({"gpus": 1, "gpu_type": "H 100"}, "resources.gpu_type 'H 100' must be letters"),
        ({"gpu_type": "H100"}, "set resources.gpus to 1 or more"),
        ({"gpu": 1}, "unknown field `gpu`"),
    ],
)
async def test_a_bad_request_is_400_naming_the_field_and_nothing_is_submitted(
    api, js, resources, says
) -> None:
    await api.post(f"{BASE}/queues", {"name": "gpu"})
    status, body = await api.post(
        f"{BASE}/queues/gpu/invocations", {"command": ["true"], "resources": resources}
    )
    assert status == 400 and says in body["error"]["message"], body
    assert await stored_invocations(js, NS, "gpu") == []


async def test_an_inline_function_cannot_hold_gpus(api, js) -> None:
    await api.post(f"{BASE}/queues", {"name": "gpu"})
    spec = {"fn": "m:f", "isolation": "inline", "resources": {"gpus": 1}}
    status, body = await api.post(f"{BASE}/queues/gpu/invocations", spec)
    assert status == 400 and "cannot hold devices" in body["error"]["message"], body
    spec["resources"] = {"cpus": 2}  # CPUs and memory are the daemon's to count
    assert (await api.post(f"{BASE}/queues/gpu/invocations", spec))[0] == 202


async def test_the_sdk_and_the_cli_send_a_request(control_plane, api, js, tmp_path, monkeypatch):
    await api.post(f"{BASE}/queues", {"name": "gpu"})
    configure(Client(control_plane.api, control_plane.admin_token))
    try:
        f = udf(_train, queue="gpu", gpus=1, gpu_type="H100", memory="32G")
        await f.asubmit()
        await f.options(gpus=4).asubmit()
        await udf(_train, queue="gpu").asubmit()
    finally:
        configure()
        sync.close()
    with pytest.raises(ValueError, match="resources.gpus must be between 0 and 64"):
        udf(_train, queue="gpu", gpus=100)
    monkeypatch.chdir(tmp_path)
    cli = cli_for(control_plane)
    await cli("submit", "-q", "gpu", "--gpus", "2", "--cpus", "4", "--memory", "16G", "--", "true")
    bad = await cli("submit", "-q", "gpu", "--memory", "16", "--", "true", expect=API_ERROR)
    assert "resources.memory '16' must be a number and a unit" in bad.stderr
    ids = [i.id for i in await stored_invocations(js, NS, "gpu")]
    shown = await cli("jobs", "show", ids[3])
    assert "resources:" in shown.stdout and "2 GPUs, 4 CPUs, 16G memory" in shown.stdout
    stored = [i.resources for i in await stored_invocations(js, NS, "gpu")]
    assert stored == [
        Resources(gpus=1, gpu_type="H100", memory="32G"),
        Resources(gpus=4, gpu_type="H100", memory="32G"),
        None,
        Resources(gpus=2, cpus=4, memory="16G"),
    ]


def _train() -> None:
    return None


async def test_a_queues_default_request_applies_to_invocations_that_name_none(api, js) -> None:
    defaults = {"resources": {"gpus": 1, "gpu_type": "H100", "cpus": 4}}
    status, body = await api.post(f"{BASE}/queues", {"name": "train", "defaults": defaults})
    assert status == 201 and body["defaults"] == defaults, body
    specs = [{"command": ["true"]}, {"command": ["true"], "resources": {"gpus": 2}}]
    status, body = await api.post(f"{BASE}/queues/train/invocations", {"invocations": specs})
    assert status == 202, body
    stored = await stored_invocations(js, NS, "train")
    assert [i.resources for i in stored] == [
        Resources(gpus=1, gpu_type="H100", cpus=4),
        Resources(gpus=2),  # its own request replaces the queue's whole
    ]
    shown = (await api.get(f"{BASE}/jobs/{body['ids'][0]}"))[1]
    assert shown["resources"] == defaults["resources"]
    # Changed by a PATCH, removed by null; a bad one is a 400 that changes nothing.
    status, body = await api.patch(
        f"{BASE}/queues/train", {"defaults": {"resources": {"gpus": 99}}}
    )
    assert status == 400 and "defaults: resources.gpus must be between 0 and 64" in str(body)
    assert (await api.get(f"{BASE}/queues/train"))[1]["defaults"] == defaults
    status, body = await api.patch(f"{BASE}/queues/train", {"defaults": None})
    assert status == 200 and body["defaults"] is None, body
    status, body = await api.post(
        f"{BASE}/queues", {"name": "bad", "defaults": {"resources": {"memory": "16"}}}
    )
    assert status == 400 and "defaults: resources.memory '16' must be a number" in str(body)
    assert (await api.get(f"{BASE}/queues/bad"))[0] == 404


async def test_a_providers_gpus_are_checked_and_given_to_each_daemon_it_launches(api) -> None:
    body = {"name": "box", "kind": "local", "config": {"gpus": 0}}
    status, answer = await api.post(f"{BASE}/providers", body)
    assert status == 400 and "gpus must be a whole number 1 to 64 (got 0)" in str(answer)
    body["config"] = {"gpus": 2, "gpu_type": "H 100"}
    status, answer = await api.post(f"{BASE}/providers", body)
    assert status == 400 and "gpu_type must be letters" in str(answer), answer
    body["config"] = {"gpus": 2, "gpu_type": "H100"}
    assert (await api.post(f"{BASE}/providers", body))[0] == 201
    status, answer = await api.post(f"{BASE}/daemons", {"name": "g", "provider": "box"})
    assert status == 202, answer
    [row] = answer["workers"]
    assert row["launched_with"] == {"gpus": "2"} and row["labels"] == {"gpu_type": "H100"}
    # A launch's own flags win over the provider's; a bad one is refused, nothing started.
    launch = {"name": "h", "provider": "box", "resources": {"gpus": "1", "memory": "8G"}}
    status, answer = await api.post(f"{BASE}/daemons", launch)
    assert status == 202 and answer["workers"][0]["launched_with"] == launch["resources"]
    bad = {"name": "x", "provider": "box", "resources": {"gpus": "two"}}
    status, answer = await api.post(f"{BASE}/daemons", bad)
    assert status == 400 and "--gpus 'two'" in str(answer), answer
    assert all(w["name"] != "x" for w in (await api.get(f"{BASE}/workers"))[1]["workers"])
