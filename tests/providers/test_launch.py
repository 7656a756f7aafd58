"""Launching daemons through the API: rows, names, refusals, and the real daemon processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import natsauth
import pytest
from polling import eventually

from lakeshore.actors.launcher import StopDaemon
from lakeshore.actors.workers import ListWorkers
from lakeshore.errors import Conflict, WorkerNotFound
from lakeshore.model import ProviderKind, WorkerStatus
from lakeshore.providers import LocalProvider
from lakeshore.providers.local import CREDENTIAL_ENV
from lakeshore.security import credentials

NS = "/v1/namespaces/default"
WAIT_S = 30.0

WaitBeats = Callable[..., Awaitable[None]]


@pytest.fixture
async def heartbeats(nats_server) -> AsyncIterator[WaitBeats]:
    """``await heartbeats(id, …)``: returns once each worker's heartbeat has been answered
    (so it has registered: a daemon heartbeats only once its registration was answered).

    It waits for the answer, not the request: a daemon retired while its heartbeat is in
    flight can miss the cancellation on Python 3.11 (``asyncio.wait_for`` returns a
    result that arrived with the cancel), which would make these tests racy.
    """
    nc = await natsauth.plane_nats(nats_server.url)
    seen: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
    asked: dict[str, str] = {}

    async def on_beat(msg) -> None:
        asked[msg.reply] = msg.subject.rsplit(".", 1)[1]

    async def on_answer(msg) -> None:
        if (worker_id := asked.pop(msg.subject, None)) is not None:
            seen[worker_id].set()

    await nc.subscribe("ls.*.hb.*", cb=on_beat)
    await nc.subscribe("_INBOX.>", cb=on_answer)
    await nc.flush()

    async def wait(*ids: str) -> None:
        async with asyncio.timeout(WAIT_S):
            for worker_id in ids:
                await seen[worker_id].wait()

    try:
        yield wait
    finally:
        await nc.close()


def local(plane) -> LocalProvider:
    return plane.parts.providers[ProviderKind.LOCAL]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_launch_answers_starting_rows_then_the_daemons_register(api, plane, heartbeats):
    assert (await api.post(f"{NS}/queues", {"name": "cpu-prep"}))[0] == 201
    body = {"queues": ["cpu-prep"], "count": 2, "name": "prep", "labels": {"tier": "cpu"}}
    status, launched = await api.post(f"{NS}/daemons", body)
    assert status == 202, launched
    rows = launched["workers"]
    assert [w["name"] for w in rows] == ["prep-00", "prep-01"]
    for w in rows:
        assert (w["status"], w["provider"], w["managed"]) == ("starting", "local", False)
        assert (w["queues"], w["labels"], w["namespace"]) == (
            ["cpu-prep"],
            {"tier": "cpu"},
            "default",
        )
    await heartbeats(*(w["id"] for w in rows))
    _, queue = await api.get(f"{NS}/queues/cpu-prep")
    assert sorted((m["name"], m["id"]) for m in queue["members"]) == [
        (w["name"], w["id"]) for w in rows
    ]
    assert {m["status"] for m in queue["members"]} <= {"idle", "busy"}
    log = plane.data_dir / "daemons" / "default" / "prep-00.log"
    assert f"--id {rows[0]['id']}" in log.read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID")
async def test_a_daemon_gets_its_own_credential_in_its_environment_not_its_command_line(
    api, plane, heartbeats
):
    _, body = await api.post(f"{NS}/daemons", {"name": "keeper"})
    [row] = body["workers"]
    await heartbeats(row["id"])
    proc = Path("/proc") / str(local(plane).pid(row["id"]))
    environ = dict(
        entry.split("=", 1) for entry in (proc / "environ").read_text().split("\0") if entry
    )
    credential = environ[CREDENTIAL_ENV]
    identity = credentials.verify(natsauth.secrets().issuer, credential)
    assert (identity.worker_id, identity.namespace) == (row["id"], "default")
    argv = (proc / "cmdline").read_text().split("\0")
    assert row["id"] in argv and not any(credential in arg for arg in argv)
    log = plane.data_dir / "daemons" / "default" / "keeper.log"
    assert credential not in log.read_text()
    # What it runs cannot read it: neither a function (in the daemon's process) …
    body = {"fn": "os:getenv", "args": [CREDENTIAL_ENV, "unset"]}
    status, answer = await api.post(f"{NS}/queues/default/invocations", body)
    assert status == 202, answer
    [inv] = answer["ids"]
    status, answer = await api.get(f"{NS}/jobs/{inv}/result?wait_s={WAIT_S}")
    assert (status, answer["value"]) == (200, "unset"), answer
    # … nor a command (in its own environment).
    body = {"command": ["sh", "-c", f"echo ${{{CREDENTIAL_ENV}:-unset}}"]}
    status, answer = await api.post(f"{NS}/queues/default/invocations", body)
    [inv] = answer["ids"]
    status, answer = await api.get(f"{NS}/jobs/{inv}/result?wait_s={WAIT_S}")
    assert (status, answer["output"].strip()) == (200, "unset"), answer


async def test_one_daemon_keeps_its_name_and_the_default_queue(api, heartbeats):
    status, launched = await api.post(f"{NS}/daemons", {"name": "scratch"})
    assert status == 202, launched
    [row] = launched["workers"]
    assert (row["name"], row["queues"]) == ("scratch", [])
    await heartbeats(row["id"])
    _, queue = await api.get(f"{NS}/queues/default")
    assert [m["name"] for m in queue["members"]] == ["scratch"]


async def test_a_name_held_by_a_live_worker_refuses_the_whole_launch(api, register):
    await register("prep-01")
    status, body = await api.post(f"{NS}/daemons", {"name": "prep", "count": 2})
    assert status == 409, body
    assert body["error"]["code"] == "already_exists"
    assert "prep-01" in body["error"]["message"] and "idle" in body["error"]["message"]
    assert (await api.get(f"{NS}/workers/prep-00"))[0] == 404


async def test_a_stopped_workers_name_can_be_launched_again(api, register):
    old = await register("solo", status=WorkerStatus.STOPPED)
    status, body = await api.post(f"{NS}/daemons", {"name": "solo"})
    assert status == 202, body
    [row] = body["workers"]
    assert row["id"] != old.id and row["status"] == "starting"
    _, shown = await api.get(f"{NS}/workers/solo")
    assert shown["id"] == row["id"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"name": "x", "queues": ["default"]}, 400, "empty list"),
        ({"name": "x", "queues": ["Bad_Q"]}, 400, "invalid queue name"),
        ({"name": "x", "count": 0}, 400, "$.count"),
        ({"name": "x", "count": 101}, 400, "$.count"),
        ({"name": "x", "colour": "red"}, 400, "colour"),
        ({"count": 2}, 400, "name"),
        ({"name": "Prep"}, 400, "invalid worker name"),
        ({"name": "a" * 62, "count": 2}, 400, "at most 63"),
        ({"name": "x", "labels": {"a=b": "c"}}, 400, "invalid label key 'a=b'"),
        ({"name": "x", "provider": "nowhere"}, 404, "no provider 'nowhere'"),
    ],
)
async def test_bad_launches_are_refused_before_any_row_exists(api, body, status, says):
    got, answer = await api.post(f"{NS}/daemons", body)
    assert got == status, answer
    assert says in answer["error"]["message"]
    assert (await api.get(f"{NS}/workers"))[1]["workers"] == []


async def test_launching_in_an_unknown_namespace_is_404(api):
    status, body = await api.post("/v1/namespaces/nowhere/daemons", {"name": "x"})
    assert (status, body["error"]["code"]) == (404, "namespace_not_found")


async def test_an_external_provider_refuses_to_launch_and_says_how_to_start_one(api, plane):
    assert (await api.post(f"{NS}/providers", {"name": "my-ec2", "kind": "external"}))[0] == 201
    launch = {"name": "box", "count": 2, "provider": "my-ec2", "queues": ["q1"]}
    status, body = await api.post(f"{NS}/daemons", launch)
    assert status == 409, body
    message = body["error"]["message"]
    assert "`export LAKESHORE_TOKEN=<your token>`" in message
    # Filled with what the plane knows: its API URL, each daemon's name, the queue.
    for name in ("box-00", "box-01"):
        command = (
            f"`lakeshore daemon run --api {plane.api} --namespace default --provider my-ec2 "
            f"--name {name} --queue q1`"
        )
        assert command in message
    assert "Add --" not in message
    assert (await api.get(f"{NS}/workers"))[1]["workers"] == []


async def test_a_daemon_whose_process_dies_is_lost_at_once(api, plane, heartbeats):
    _, body = await api.post(f"{NS}/daemons", {"name": "victim", "queues": ["q1"]})
    [row] = body["workers"]
    await heartbeats(row["id"])
    os.kill(local(plane).pid(row["id"]), signal.SIGKILL)
    async with asyncio.timeout(WAIT_S):
        assert await local(plane).wait_exited(row["id"]) == -signal.SIGKILL
    [worker] = await plane.parts.workers.ask(ListWorkers("default"))
    assert worker.status is WorkerStatus.LOST
    [event] = await plane.parts.store.list_queue_events("default", "q1", limit=1, verbose=True)
    assert event.type == "daemon_lost" and event.detail["exit_code"] == -signal.SIGKILL
    assert event.detail["reason"].startswith("killed by SIGKILL")


async def test_stop_forces_a_local_daemon_and_refuses_others(api, plane, heartbeats, register):
    _, body = await api.post(f"{NS}/daemons", {"name": "forced"})
    [row] = body["workers"]
    await heartbeats(row["id"])
    await plane.parts.launcher.ask(StopDaemon("default", "forced"))
    async with asyncio.timeout(WAIT_S):
        assert await local(plane).wait_exited(row["id"]) == 0
    [worker] = await plane.parts.workers.ask(ListWorkers("default"))
    assert worker.status is WorkerStatus.STOPPED
    await register("by-hand")
    with pytest.raises(Conflict, match="runs no process this control plane started"):
        await plane.parts.launcher.ask(StopDaemon("default", "by-hand"))
    with pytest.raises(WorkerNotFound):
        await plane.parts.launcher.ask(StopDaemon("default", "nobody"))


async def test_the_local_daemons_stop_with_the_control_plane(plane_factory, heartbeats):
    handle = await plane_factory()
    async with handle.client() as api:
        _, body = await api.post(f"{NS}/daemons", {"name": "short", "count": 2})
    ids = [w["id"] for w in body["workers"]]
    await heartbeats(*ids)
    pids = [local(handle.plane).pid(i) for i in ids]
    async with asyncio.timeout(15):
        await handle.stop()
    assert all(pid is not None and gone(pid) for pid in pids)
    # Their last heartbeat (``stopped``) reached the registry before it went down.
    again = await plane_factory(data_dir=handle.data_dir)
    async with again.client() as api:
        _, listed = await api.get(f"{NS}/workers")
    assert {(w["name"], w["status"]) for w in listed["workers"]} == {
        ("short-00", "stopped"),
        ("short-01", "stopped"),
    }


async def test_stop_force_stops_a_local_daemon_now_and_refuses_one_started_by_hand(
    api, plane, register
):
    _, body = await api.post(f"{NS}/daemons", {"name": "stuck"})
    [row] = body["workers"]
    status, answer = await api.delete(f"{NS}/workers/stuck?force=true")
    assert status == 202, answer
    await eventually(
        lambda: api.get(f"{NS}/workers/stuck"),
        until=lambda answer: answer[1]["status"] == "stopped",
        timeout_s=WAIT_S,
        what="stuck stopped",
    )
    assert local(plane).pid(row["id"]) is None

    hand = await register("by-hand", status=WorkerStatus.IDLE)
    status, answer = await api.delete(f"{NS}/workers/by-hand?force=true")
    assert (status, answer["error"]["code"]) == (409, "conflict"), answer
    assert (await api.get(f"{NS}/workers/{hand.id}"))[1]["status"] == "idle"
