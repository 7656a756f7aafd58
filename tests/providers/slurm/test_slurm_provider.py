"""The ``slurm`` provider for real: daemons as jobs of a one-node Slurm cluster started by
the suite, launched by hand and by the controller, stopped with scancel, watched with
squeue (planes tick every 0.2 s, daemons beat every 0.2 s, squeue is asked every 0.2 s)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import natsauth
import pytest
from fleet_waits import FleetWaits
from polling import eventually
from slurmd import PARTITION, SlurmCluster, free_port

from lakeshore.actors.launcher import StopDaemon
from lakeshore.errors import Conflict, Unavailable
from lakeshore.model import Provider, ProviderKind, Worker, WorkerStatus, now
from lakeshore.providers.local import CREDENTIAL_ENV
from lakeshore.providers.slurm import SlurmProvider
from lakeshore.security import credentials

NS = "default"
BASE = f"/v1/namespaces/{NS}"
HERE = Path(__file__).parent
#: Bound of every wait: a job starts in about a second, a daemon registers a second later.
WAIT_S = 30.0
UP = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})
GONE = frozenset({WorkerStatus.STOPPED, WorkerStatus.LOST})
#: The control plane of every test here (as the controller tests').
PLANE = {"tick_s": 0.2, "heartbeat_s": 0.2, "lost_after_s": 2}


class Bench(FleetWaits):
    """A control plane with a ``slurm`` provider ``hpc`` on the test cluster."""

    def __init__(self, handle: Any, api: Any, slurm: SlurmCluster, gate: Path) -> None:
        self.handle, self.plane, self.api = handle, handle.plane, api
        self.slurm, self.gate = slurm, gate

    def config(self, **config: Any) -> dict[str, Any]:
        return {"slurm_conf": str(self.slurm.conf), "poll_s": 0.2, **config}

    async def provider(self, name: str = "hpc", **config: Any) -> None:
        body = {"name": name, "kind": "slurm", "config": self.config(**config)}
        status, answer = await self.api.post(f"{BASE}/providers", body)
        assert status == 201, answer

    async def post(self, path: str, body: Any = None) -> Any:
        status, answer = await self.api.post(BASE + path, body)
        assert status in (200, 201, 202), answer
        return answer

    async def launch(self, name: str, queues: list[str], provider: str = "hpc") -> Worker:
        body = {"name": name, "queues": queues, "provider": provider}
        [row] = (await self.post("/daemons", body))["workers"]
        assert (row["status"], row["provider"]) == ("starting", provider)
        return await self.worker(row["id"])

    async def worker(self, worker_id: str) -> Worker:
        return next(w for w in await self.workers() if w.id == worker_id)

    async def wait_worker(self, worker_id: str, statuses: frozenset[WorkerStatus]) -> Worker:
        return await eventually(
            lambda: self.worker(worker_id),
            until=lambda w: w.status in statuses,
            timeout_s=WAIT_S,
            what=f"worker {worker_id} in {sorted(statuses)}",
        )

    async def wait_placed(self, worker_id: str, *keys: str) -> Worker:
        return await eventually(
            lambda: self.worker(worker_id),
            until=lambda w: all(k in w.placement for k in ("slurm_job", *keys)),
            timeout_s=WAIT_S,
            what=f"worker {worker_id} placed with {keys}",
        )

    async def submit(self, queue: str, fn: str, *args: Any, count: int = 1) -> list[str]:
        specs = [{"fn": f"slurm_jobs:{fn}", "args": list(args)}] * count
        return (await self.post(f"/queues/{queue}/invocations", {"invocations": specs}))["ids"]

    async def result(self, job_id: str) -> dict[str, Any]:
        async def finished() -> dict[str, Any] | None:
            status, body = await self.api.get(f"{BASE}/jobs/{job_id}/result")
            return body if status == 200 else None

        return await eventually(finished, timeout_s=WAIT_S, what=f"the result of {job_id}")

    async def job_ends(self, job_id: str) -> None:
        """Wait until Slurm has the job ended (or forgotten)."""
        await eventually(
            lambda: asyncio.to_thread(self.slurm.state, job_id),
            until=lambda state: state in (None, "COMPLETED", "CANCELLED", "FAILED"),
            timeout_s=WAIT_S,
            what=f"slurm job {job_id} to end",
        )

    def backend(self) -> SlurmProvider:
        return self.plane.parts.providers[ProviderKind.SLURM]


@pytest.fixture
async def bench(plane_factory, slurm, monkeypatch, tmp_path) -> AsyncIterator[Bench]:
    # The jobs get sbatch's environment, hence this one: their daemons import
    # ``slurm_jobs`` from here.
    paths = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    handle = await plane_factory(**PLANE)
    gate = tmp_path / "gate"
    async with handle.client() as api:
        try:
            yield Bench(handle, api, slurm, gate)
        finally:
            gate.touch()
            # The plane first: its controller would replace the daemons cancelled next.
            await handle.stop()
            await asyncio.to_thread(slurm.cancel_all)


def daemon_pid(worker_id: str) -> int:
    """The pid of the daemon process running ``worker_id`` on this host."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"daemon" in argv and worker_id.encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no daemon process of {worker_id} runs on this host")


def environ(pid: int) -> dict[str, str]:
    raw = (Path("/proc") / str(pid) / "environ").read_text()
    return dict(entry.split("=", 1) for entry in raw.split("\0") if "=" in entry)


async def test_a_daemon_runs_as_a_slurm_job_with_its_credential_only_in_its_environment(bench):
    # The nodes may reach NATS by another name than the control plane advertises.
    nats_url = bench.plane.nats_url.replace("127.0.0.1", "localhost")
    assert nats_url != bench.plane.nats_url
    await bench.provider(nats_url=nats_url)
    await bench.post("/queues", {"name": "q"})
    row = await bench.launch("sl", ["q"])
    await bench.wait_worker(row.id, UP)
    placed = await bench.wait_placed(row.id, "node")
    job_id = placed.placement["slurm_job"]
    assert placed.placement["partition"] == PARTITION
    assert placed.placement["node"] == bench.slurm.node
    assert placed.placement["slurm_state"] == "RUNNING"
    assert bench.slurm.jobs()[job_id] == "RUNNING"
    assert job_id in bench.backend().watched()

    [invocation] = await bench.submit("q", "where")
    result = await bench.result(invocation)
    assert result["ok"], result
    assert result["value"] == job_id

    pid = daemon_pid(row.id)
    credential = environ(pid)[CREDENTIAL_ENV]
    identity = credentials.verify(natsauth.secrets().issuer, credential)
    assert (identity.worker_id, identity.namespace) == (row.id, NS)
    argv = (Path("/proc") / str(pid) / "cmdline").read_text().split("\0")
    assert row.id in argv and not any(credential in arg for arg in argv)
    assert argv[argv.index("--nats-url") + 1] == nats_url
    shown = bench.slurm.show(job_id)
    assert f"lakeshore-{row.name}" in shown and row.id in shown and "exec " in shown
    assert credential not in shown
    log = Path(placed.placement["log"])
    assert log.name == f"sl-{job_id}.log" and credential not in log.read_text()


async def test_stop_scancels_the_job_and_the_row_is_stopped(bench):
    await bench.provider()
    row = await bench.launch("sl", ["q"])
    await bench.wait_worker(row.id, UP)
    job_id = (await bench.wait_placed(row.id)).placement["slurm_job"]

    await bench.plane.parts.launcher.ask(StopDaemon(NS, "sl"))
    await bench.wait_worker(row.id, frozenset({WorkerStatus.STOPPED}))
    await bench.job_ends(job_id)
    assert await bench.events("q", "daemon_lost") == []
    await eventually(lambda: job_id not in bench.backend().watched(), timeout_s=WAIT_S)
    with pytest.raises(Conflict, match="runs no process"):
        await bench.plane.parts.launcher.ask(StopDaemon(NS, "sl"))


async def test_a_restarted_control_plane_stops_a_job_the_first_one_started(bench, plane_factory):
    await bench.provider()
    row = await bench.launch("survivor", ["q"])
    await bench.wait_worker(row.id, UP)
    job_id = (await bench.wait_placed(row.id)).placement["slurm_job"]

    await bench.handle.stop()
    assert bench.slurm.jobs()[job_id] == "RUNNING"
    again = await plane_factory(data_dir=bench.handle.data_dir, **PLANE)
    async with again.client() as api:
        bench = Bench(again, api, bench.slurm, bench.gate)
        assert bench.backend().watched() == []
        # The daemon keeps beating: the new plane has it up from its stored row.
        await bench.wait_worker(row.id, UP)
        await bench.plane.parts.launcher.ask(StopDaemon(NS, "survivor"))
        await bench.wait_worker(row.id, frozenset({WorkerStatus.STOPPED}))
        await bench.job_ends(job_id)


async def test_a_killed_daemon_is_lost_and_its_elastic_queue_gets_a_new_job(bench):
    await bench.provider()
    await bench.post("/queues", {"name": "el", "elasticity": {
        "kind": "elastic", "min": 1, "max": 1, "provider": "hpc",
    }})  # fmt: skip
    [victim] = await bench.wait_managed("el", 1)
    victim = await bench.wait_placed(victim.id)
    job_id = victim.placement["slurm_job"]

    os.kill(daemon_pid(victim.id), signal.SIGKILL)
    await bench.wait_worker(victim.id, frozenset({WorkerStatus.LOST}))
    [lost] = await bench.wait_events("el", "daemon_lost")
    # Reported by the poll (squeue), not by the heartbeat sweep 2 s later.
    assert lost.detail["worker"] == victim.id and lost.detail["exit_code"] == -signal.SIGKILL
    assert lost.detail["reason"].startswith(f"slurm job {job_id} FAILED (killed by SIGKILL)")
    [replaced] = await bench.wait_events("el", "daemon_replaced")
    assert replaced.detail["lost"] == victim.id
    [new] = await bench.wait_managed("el", 1)
    assert new.id == replaced.detail["by"] != victim.id
    ups = await bench.wait_events("el", "scaled_up", 2)
    assert new.id in ups[-1].detail["ids"]
    new = await bench.wait_placed(new.id)
    assert new.placement["slurm_job"] != job_id
    assert bench.slurm.jobs()[new.placement["slurm_job"]] == "RUNNING"
    await bench.job_ends(job_id)


async def test_fully_elastic_scales_slurm_jobs_from_zero_to_two_and_back(bench):
    await bench.provider()
    await bench.post("/queues", {"name": "fe", "elasticity": {
        "kind": "fully_elastic", "max": 2, "target_pending": 1, "scale_down_idle_s": 0.5,
        "provider": "hpc",
    }})  # fmt: skip
    assert await bench.managed("fe", UP | {WorkerStatus.STARTING}) == []

    held = await bench.submit("fe", "hold", str(bench.gate), count=2)
    up = await bench.wait_managed("fe", 2)
    up = [await bench.wait_placed(w.id) for w in up]
    jobs = {w.placement["slurm_job"] for w in up}
    assert len(jobs) == 2
    assert {bench.slurm.jobs().get(j) for j in jobs} == {"RUNNING"}

    bench.gate.touch()
    for invocation in held:
        assert (await bench.result(invocation))["value"] == "released"
    await bench.wait_managed("fe", 2, GONE)
    downs = await bench.wait_events("fe", "scaled_down", 2)
    assert {e.detail["worker"] for e in downs} == {w.id for w in up}
    assert all(w.status is WorkerStatus.STOPPED for w in await bench.managed("fe", GONE))
    for job_id in jobs:
        await bench.job_ends(job_id)
    assert bench.slurm.jobs() == {}


async def test_a_job_sbatch_refuses_ends_the_row_with_sbatchs_reason(bench):
    await bench.provider("nowhere", partition="no-such-partition")
    row = await bench.launch("refused", ["q"], provider="nowhere")
    lost = await bench.wait_worker(row.id, frozenset({WorkerStatus.LOST}))
    assert lost.placement == {}
    [event] = await bench.wait_events("q", "daemon_lost")
    assert event.detail["worker"] == row.id and event.detail["exit_code"] is None
    assert "sbatch refused the job" in event.detail["reason"]
    assert "invalid partition" in event.detail["reason"].lower()
    assert bench.slurm.jobs() == {}


async def test_a_launch_without_a_reachable_slurmctld_ends_the_row_with_sbatchs_reason(
    bench, tmp_path
):
    conf = tmp_path / "unreachable.conf"
    lines = bench.slurm.conf.read_text().splitlines()
    lines = [
        f"SlurmctldPort={free_port()}" if line.startswith("SlurmctldPort=") else line
        for line in lines
    ]
    # sbatch tries to connect about once a second for MessageTimeout seconds (default 10).
    conf.write_text("\n".join([*lines, "MessageTimeout=2", ""]))
    await bench.provider("down", slurm_conf=str(conf))
    row = await bench.launch("unlucky", ["q"], provider="down")
    await bench.wait_worker(row.id, frozenset({WorkerStatus.LOST}))
    [event] = await bench.wait_events("q", "daemon_lost")
    assert "sbatch refused the job" in event.detail["reason"]
    assert "Unable to contact slurm controller" in event.detail["reason"]


def test_a_launch_is_refused_where_sbatch_is_not_installed(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    backend = SlurmProvider(tmp_path, lambda *a: None, lambda *a: None)
    row = Provider(name="hpc", namespace=NS, kind=ProviderKind.SLURM, created_at=now())
    with pytest.raises(Unavailable, match="sbatch is not on the control plane's PATH"):
        backend.check_launch(row)


async def test_a_job_that_fails_before_its_daemon_registers_is_lost_at_once(bench, tmp_path):
    logs = tmp_path / "job-logs"
    logs.mkdir()
    await bench.provider(python="/nonexistent/python", log_dir=str(logs))
    row = await bench.launch("doomed", ["q"])
    # Long before the launch timeout (120 s): squeue says the job failed.
    lost = await bench.wait_worker(row.id, frozenset({WorkerStatus.LOST}))
    job_id = lost.placement["slurm_job"]
    [event] = await bench.wait_events("q", "daemon_lost")
    assert event.detail["exit_code"] == 127
    reason = event.detail["reason"]
    assert reason.startswith(f"slurm job {job_id} FAILED (exited with code 127)")
    assert "/nonexistent/python: not found" in reason  # the job's last output
    assert lost.placement["log"] == str(logs / f"doomed-{job_id}.log")
    assert lost.placement["slurm_state"] == "FAILED"


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"partiton": "gpu"}, "unknown field `partiton`"),
        ({"time": 240}, "time must be a string"),
        ({"time": "4 hours"}, "$.time"),
        ({"mem": "lots"}, "$.mem"),
        ({"cpus_per_task": 0}, "$.cpus_per_task"),
        ({"poll_s": 0}, "$.poll_s"),
        ({"partition": "a b"}, "$.partition"),
        ({"slurm_conf": "slurm.conf"}, "absolute path"),
        ({"extra_args": ["--wrap=sleep 1"]}, "may not contain '--wrap=sleep 1'"),
        ({"extra_args": ["--exp=NONE"]}, "may not contain"),
        ({"extra_args": ["-Jname"]}, "may not contain"),
        ({"extra_args": "--exclusive"}, "$.extra_args"),
        ({"nats_url": "localhost:4222"}, "$.nats_url"),
    ],
)
async def test_a_bad_config_is_refused_when_the_provider_is_added(api, config, says):
    body = {"name": "hpc", "kind": "slurm", "config": config}
    status, answer = await api.post(f"{BASE}/providers", body)
    assert (status, answer["error"]["code"]) == (400, "invalid"), answer
    assert says in answer["error"]["message"]
    assert [p["name"] for p in (await api.get(f"{BASE}/providers"))[1]["providers"]] == ["local"]


async def test_a_queued_job_is_not_timed_out_and_daemon_stop_scancels_it_where_it_waits(
    plane_factory, slurm, tmp_path
):
    handle = await plane_factory(**PLANE, launch_timeout_s=1)
    async with handle.client() as api:
        bench = Bench(handle, api, slurm, tmp_path / "gate")
        # Held in the Slurm queue for an hour: the daemon cannot register meanwhile.
        await bench.provider(extra_args=["--begin=now+3600"])
        row = await bench.launch("waiting", ["q"])
        queued = await eventually(
            lambda: bench.worker(row.id),
            until=lambda w: w.placement.get("slurm_state") == "PENDING",
            timeout_s=WAIT_S,
            what="the job seen pending",
        )
        assert queued.placement["queued"] == "true"
        job_id = queued.placement["slurm_job"]
        # Three times the launch timeout later, still starting: Slurm holds it, not a fault.
        await eventually(
            lambda: bench.worker(row.id),
            until=lambda w: (now() - w.started_at).total_seconds() > 3,
            timeout_s=WAIT_S,
        )
        assert (await bench.worker(row.id)).status is WorkerStatus.STARTING

        status, retired = await api.delete(f"{BASE}/workers/waiting")
        assert (status, retired["status"]) == (202, "retiring"), retired
        await bench.job_ends(job_id)
        stopped = await bench.wait_worker(row.id, GONE)
        assert stopped.status is WorkerStatus.STOPPED
        await handle.stop()


async def test_daemon_stop_force_scancels_a_running_job(bench):
    await bench.provider()
    row = await bench.launch("forced", ["q"])
    await bench.wait_worker(row.id, UP)
    job_id = (await bench.wait_placed(row.id)).placement["slurm_job"]
    status, answer = await bench.api.delete(f"{BASE}/workers/forced?force=true")
    assert status == 202, answer
    await bench.job_ends(job_id)
    assert (await bench.wait_worker(row.id, GONE)).status is WorkerStatus.STOPPED


async def test_pending_gpu_work_scales_slurm_daemons_by_their_gres(bench):
    # The node declares 4 h100 GPUs (gres on empty files: slurmd.py); each daemon's job asks
    # for two (--gres=gpu:h100:2) and is told it has them (--gpus 2, type h100).
    await bench.provider(gres="gpu:h100:2")
    await bench.post("/queues", {"name": "gpu", "elasticity": {
        "kind": "fully_elastic", "max": 4, "target_pending": 100, "scale_down_idle_s": 0.5,
        "provider": "hpc",
    }})  # fmt: skip
    spec = {"fn": "slurm_jobs:devices", "args": [str(bench.gate)]}
    asks = [{**spec, "resources": {"gpus": 2, "gpu_type": "H100"}}] * 2
    # One request no daemon of the provider could ever hold: it launches nothing for it.
    big = {**spec, "resources": {"gpus": 4}}
    answer = await bench.post("/queues/gpu/invocations", {"invocations": [*asks, big]})
    held, [too_big] = answer["ids"][:2], answer["ids"][2:]
    # target_pending 100 sizes one daemon; the GPUs asked (2 x 2 at 2 a daemon) size two.
    up = await bench.wait_managed("gpu", 2)
    up = [await bench.wait_placed(w.id) for w in up]
    # The asks are read from the history, which may trail the stream by a tick: the first
    # decision can size by count alone (one daemon) before the one that sizes by GPUs.
    events = await eventually(
        lambda: bench.events("gpu", "scaled_up"),
        until=lambda found: any("GPUs at" in e.detail["reason"] for e in found),
        timeout_s=WAIT_S,
        what="a scaled_up event sized by GPUs",
    )
    reason = next(e.detail["reason"] for e in events if "GPUs at" in e.detail["reason"])
    assert "4 GPUs at 2 per daemon → 2" in reason, reason
    assert "1 that no daemon of hpc (2 GPUs h100) could hold" in reason, reason
    jobs = {w.placement["slurm_job"]: w for w in up}
    for job_id in jobs:
        shown = bench.slurm.show(job_id)
        assert "gres/gpu:h100=2" in shown or "gpu:h100:2" in shown, shown
    # Both run at once, each on its own daemon: the first daemon to pull may take both,
    # and hands the one it cannot start back after its hold_s (2 s) for the other.
    for job_id in held:
        await eventually(
            lambda job_id=job_id: bench.api.get(f"{BASE}/jobs/{job_id}"),
            until=lambda answer: answer[1].get("state") == "running",
            timeout_s=WAIT_S,
            what=f"{job_id} running",
        )
    bench.gate.touch()
    results = [(await bench.result(i))["value"] for i in held]
    assert all(r["visible"] == "0,1" and r["job"] in jobs for r in results), results
    assert len({r["job"] for r in results}) == 2  # each on its own daemon
    status, job = await bench.api.get(f"{BASE}/jobs/{too_big}")
    assert job["state"] == "pending", job
    assert len(await bench.managed("gpu", UP | {WorkerStatus.STARTING})) <= 2
    await bench.post(f"/jobs/{too_big}/cancel")
