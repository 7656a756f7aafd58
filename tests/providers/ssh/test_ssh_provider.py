"""The ssh provider against a real sshd: start, survive, stop, refuse, fail clearly."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import natsauth
import pytest
from polling import eventually
from ssh_fleet import BASE, GONE, NS, PROVIDER, UP, WAIT_S
from sshd import runs

from lakeshore.actors.launcher import StopDaemon
from lakeshore.errors import Invalid
from lakeshore.model import DaemonAccess, Provider, ProviderKind, Worker, WorkerStatus, now
from lakeshore.providers.local import CA_ENV, CREDENTIAL_ENV, daemon_flags
from lakeshore.providers.ssh import SshProvider
from lakeshore.providers.ssh_config import parse_config
from lakeshore.security import credentials


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode()
    return dict(entry.split("=", 1) for entry in raw.split("\0") if "=" in entry)


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


async def test_launch_starts_a_daemon_that_registers_runs_work_and_keeps_its_secret(fleet):
    nats_url = fleet.plane.nats_url.replace("127.0.0.1", "localhost")
    env = {**fleet.config()["env"], "RUN_MARK": "it's here"}
    await fleet.add_provider(nats_url=nats_url, env=env)
    await fleet.queue("ssh-q")
    [wid] = await fleet.launch("remote", ["ssh-q"])
    worker = await fleet.wait_worker(wid, UP, placed=True)
    assert worker.placement["host"] == "127.0.0.1" and worker.provider == PROVIDER
    pid = int(worker.placement["pid"])
    assert runs(pid, wid)
    jobs = await fleet.submit("ssh-q", "noop", count=3)
    await fleet.wait_jobs(jobs)
    for job in jobs:
        assert (await fleet.api.get(f"{BASE}/jobs/{job}"))[1]["worker"] == wid

    env, argv = environ(pid), cmdline(pid)
    credential = env[CREDENTIAL_ENV]
    identity = credentials.verify(natsauth.secrets().issuer, credential)
    assert (identity.worker_id, identity.namespace) == (wid, NS)
    assert env["RUN_MARK"] == "it's here" and CA_ENV not in env
    assert argv[argv.index("--nats-url") + 1] == nats_url
    assert argv[argv.index("--id") + 1] == wid and "--heartbeat-s" in argv
    every_command_line = subprocess.run(
        ["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=True
    ).stdout
    assert wid in every_command_line and credential not in every_command_line
    log = fleet.tmp_path / "daemons" / NS / "remote.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    text = log.read_text()
    assert f"--id {wid}" in text and credential not in text
    assert (log.parent / f"{wid}.pid").read_text().strip() == str(pid)
    # The daemon runs in a session of its own, not in the SSH session's.
    assert os.getsid(pid) == pid


async def test_a_daemon_outlives_the_ssh_session_that_started_it(fleet):
    await fleet.add_provider()
    [wid] = await fleet.launch("lasting")
    worker = await fleet.wait_worker(wid, UP, placed=True)
    # The launch's connection is closed once it is done; closing the backend too ends
    # every SSH connection of this control plane.
    await fleet.backend.wait_idle()
    await fleet.backend.close()
    closed_at = now()

    async def beat_since_close() -> Worker:
        return next(w for w in await fleet.workers() if w.id == wid)

    # Longer than lost_after_s (2 s) without an SSH session: still heartbeating, not lost.
    later = await eventually(
        beat_since_close,
        until=lambda w: w.last_heartbeat and w.last_heartbeat > closed_at + timedelta(seconds=2.5),
        timeout_s=WAIT_S,
        what="a heartbeat 2.5 s after the SSH connections closed",
    )
    assert later.status in UP
    assert runs(int(worker.placement["pid"]), wid)


async def test_stop_sigterms_the_daemon_on_its_host_and_the_row_ends_stopped(fleet):
    await fleet.add_provider()
    [wid] = await fleet.launch("stoppable")
    worker = await fleet.wait_worker(wid, UP, placed=True)
    pid = int(worker.placement["pid"])
    await fleet.plane.parts.launcher.ask(StopDaemon(NS, "stoppable"))
    stopped = await fleet.wait_worker(wid, GONE)
    assert stopped.status is WorkerStatus.STOPPED
    await eventually(lambda: not runs(pid, wid), timeout_s=WAIT_S, what="the daemon's end")
    await fleet.backend.wait_idle()
    log = (fleet.tmp_path / "daemons" / NS / "stoppable.log").read_text()
    # The daemon's own last words: it drained on SIGTERM, it was not killed.
    assert "daemon stoppable stopped" in log
    assert not (fleet.tmp_path / "daemons" / NS / f"{wid}.pid").exists()
    with pytest.raises(Exception, match="runs no process this control plane started"):
        await fleet.plane.parts.launcher.ask(StopDaemon(NS, "stoppable"))


async def test_two_providers_sharing_a_host_and_log_dir_keep_each_others_daemons(fleet):
    await fleet.add_provider("cpu")
    await fleet.add_provider("gpu", slots=1)
    [first] = await fleet.launch("first", provider="cpu")
    await fleet.wait_worker(first, UP, placed=True)
    # gpu's slot count runs over the shared dir: cpu's daemon is not its own, yet alive.
    [second] = await fleet.launch("second", provider="gpu")
    await fleet.wait_worker(second, UP, placed=True)
    pid_files = fleet.tmp_path / "daemons" / NS
    assert {f.stem for f in pid_files.glob("*.pid")} == {first, second}
    await fleet.plane.parts.launcher.ask(StopDaemon(NS, "first"))
    assert (await fleet.wait_worker(first, GONE)).status is WorkerStatus.STOPPED


async def test_stop_works_from_a_restarted_control_plane(fleet):
    await fleet.add_provider()
    [wid] = await fleet.launch("survivor")
    worker = await fleet.wait_worker(wid, UP, placed=True)
    pid = int(worker.placement["pid"])
    await fleet.restart()
    assert runs(pid, wid), "closing the control plane must not stop ssh daemons"
    again = await fleet.wait_worker(wid, UP)
    assert again.placement == worker.placement
    await fleet.plane.parts.launcher.ask(StopDaemon(NS, wid))
    assert (await fleet.wait_worker(wid, GONE)).status is WorkerStatus.STOPPED
    await eventually(lambda: not runs(pid, wid), timeout_s=WAIT_S, what="the daemon's end")


@dataclass
class Exits:
    """The exit and placed callbacks of a backend built by a test."""

    exits: asyncio.Queue[tuple[Worker, int | None, str, bool]] = field(
        default_factory=asyncio.Queue
    )
    placed: asyncio.Queue[tuple[Worker, dict[str, str]]] = field(default_factory=asyncio.Queue)

    def on_exit(self, worker: Worker, code: int | None, reason: str, requested: bool) -> None:
        self.exits.put_nowait((worker, code, reason, requested))

    def on_placed(self, worker: Worker, placement: dict[str, str]) -> None:
        self.placed.put_nowait((worker, placement))

    async def next_exit(self) -> tuple[Worker, int | None, str, bool]:
        async with asyncio.timeout(WAIT_S):
            return await self.exits.get()


async def test_a_daemon_that_does_not_drain_in_time_is_killed(fleet):
    """A backend with no memory of the daemon (as after a restart) and a 0.3 s bound."""
    row = await fleet.add_provider()
    await fleet.queue("slow")
    [wid] = await fleet.launch("busy", ["slow"])
    await fleet.hold("slow", 1)
    worker = await fleet.wait_worker(wid, frozenset({WorkerStatus.BUSY}), placed=True)
    calls = Exits()
    backend = SshProvider(calls.on_exit, calls.on_placed, stop_timeout_s=0.3)
    provider = Provider(
        name=PROVIDER, namespace=NS, kind=ProviderKind.SSH, config=row["config"], created_at=now()
    )
    try:
        assert await backend.stop(worker, provider) is True
        assert await backend.stop(worker, provider) is True  # in progress: nothing more sent
        got, code, reason, requested = await calls.next_exit()
    finally:
        await backend.close()
    assert (got.id, code, requested) == (wid, None, True)
    assert reason.startswith("killed by SIGKILL on host 127.0.0.1") and "after 0.3 s" in reason
    assert not runs(int(worker.placement["pid"]), wid)
    assert calls.exits.empty()


class _SilentNats:
    """A TCP server that accepts and never answers: a daemon pointed at it waits for NATS."""

    async def __aenter__(self) -> str:
        self._held: list[asyncio.StreamWriter] = []

        async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._held.append(writer)

        self._server = await asyncio.start_server(hold, "127.0.0.1", 0)
        return f"nats://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._held:
            writer.close()
        self._server.close()
        await self._server.wait_closed()


async def test_the_credential_and_the_ca_reach_the_daemon_through_stdin_only(fleet):
    """Straight to the backend: a CA too (the test NATS has none), and no control plane."""
    config = fleet.config()
    provider = Provider(
        name="direct", namespace="solo", kind=ProviderKind.SSH, config=config, created_at=now()
    )
    worker = Worker(
        id="w-direct01", name="direct", namespace="solo", provider="direct", started_at=now()
    )
    ca = "-----BEGIN CERTIFICATE-----\nnot a real one\n-----END CERTIFICATE-----"
    calls = Exits()
    backend = SshProvider(calls.on_exit, calls.on_placed, flags=daemon_flags(heartbeat_s=0.2))
    async with _SilentNats() as nats_url:
        access = DaemonAccess(
            worker_id=worker.id,
            namespace="solo",
            nats_url=nats_url,
            credential="secret-of-direct",
            expires_at=now() + timedelta(hours=1),
            ca_pem=ca,
        )
        try:
            await backend.launch(provider, [worker], lambda w: access)
            async with asyncio.timeout(WAIT_S):
                placed, placement = await calls.placed.get()
            pid = int(placement["pid"])
            # Placed as soon as it is forked; `nohup setsid python …` carries the worker's id
            # too, and between two execs the environment reads empty: wait for python itself.
            await eventually(
                lambda: runs(pid, worker.id) and cmdline(pid)[1:3] == ["-m", "lakeshore"],
                timeout_s=WAIT_S,
                what="the daemon's exec",
            )
            env = environ(pid)
            assert CREDENTIAL_ENV in env, (cmdline(pid), sorted(env))
            assert (env[CREDENTIAL_ENV], env[CA_ENV]) == ("secret-of-direct", ca)
            assert not any("secret-of-direct" in arg for arg in cmdline(pid))
            ran = Worker(**{**_fields(worker), "placement": placement})
            assert await backend.stop(ran, provider) is True
            _, code, reason, requested = await calls.next_exit()
        finally:
            await backend.close()
    assert (code, requested) == (None, True)
    assert reason == f"stopped by SIGTERM on host 127.0.0.1 (pid {pid})"
    assert (
        "secret-of-direct" not in (fleet.tmp_path / "daemons" / "solo" / "direct.log").read_text()
    )


def _fields(worker: Worker) -> dict:
    return {f: getattr(worker, f) for f in worker.__struct_fields__}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("why", ["wrong-port", "unknown-host-key", "no-python"])
async def test_a_host_it_cannot_use_ends_the_worker_lost_with_the_host_named(fleet, tmp_path, why):
    if why == "wrong-port":
        port = _closed_port()
        await fleet.add_provider(port=port)
        expected = ["cannot reach host 127.0.0.1", "onnect"]
    elif why == "no-python":
        await fleet.add_provider(python="/no/such/python3")
        expected = ["host 127.0.0.1: /no/such/python3: not found", "set the provider's python:"]
    else:
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        await fleet.add_provider(known_hosts=str(empty))
        expected = ["cannot reach host 127.0.0.1", "known_hosts"]
    await fleet.queue("nowhere")
    async with asyncio.timeout(WAIT_S):
        [wid] = await fleet.launch("stranded", ["nowhere"])
        row = await fleet.wait_worker(wid, GONE)
    assert row.status is WorkerStatus.LOST and row.placement == {}
    [event] = await fleet.wait_events("nowhere", "daemon_lost")
    assert event.detail["worker"] == wid
    for part in expected:
        assert part in event.detail["reason"], event.detail["reason"]


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({}, "needs hosts"),
        ({"hosts": []}, "hosts is empty"),
        ({"hosts": "gpu1"}, "$.hosts"),
        ({"hosts": ["gpu1"], "colour": "red"}, "no key 'colour'; its keys are: hosts, user"),
        ({"hosts": ["gpu1"], "port": "ssh"}, "$.port"),
        ({"hosts": ["gpu1"], "port": 70000}, "$.port"),
        ({"hosts": ["gpu1:99999"]}, "not [user@]host[:port]"),
        ({"hosts": ["a b"]}, "not [user@]host[:port]"),
        ({"hosts": ["gpu1", "gpu1:22"]}, "listed twice"),
        ({"hosts": ["gpu1"], "known_hosts": None}, "insecure_no_host_key_check: true"),
        (
            {"hosts": ["gpu1"], "known_hosts": "/k", "insecure_no_host_key_check": True},
            "contradict",
        ),
        ({"hosts": ["gpu1"], "slots": 0}, "$.slots"),
        ({"hosts": ["gpu1"], "env": {"A-B": "x"}}, "not an environment variable name"),
        ({"hosts": ["gpu1"], "env": {CREDENTIAL_ENV: "x"}}, "set by the control plane"),
        ({"hosts": ["gpu1"], "env": {"N": True}}, "env N: True is not a string; quote it"),
        ({"hosts": ["gpu1"], "env": {"N": [1]}}, "env N: [1] is not a string"),
        ({"hosts": ["gpu1"], "python": ""}, "python"),
        ({"hosts": ["gpu1"], "log_dir": "~bob/logs"}, "only ~ and ~/"),
        ({"hosts": ["gpu1"], "connect_timeout_s": 0}, "$.connect_timeout_s"),
    ],
)
def test_bad_configs_are_refused_with_what_to_fix(config, says):
    with pytest.raises(Invalid) as refused:
        SshProvider(print, print).check_config(config)
    assert says in refused.value.message


def test_good_configs_are_accepted():
    backend = SshProvider(print, print)
    backend.check_config({"hosts": ["gpu1", "gpu2:2222", "lake@gpu3", "[::1]:2200"]})
    backend.check_config({"hosts": ["h"], "known_hosts": None, "insecure_no_host_key_check": True})
    backend.check_config(
        {"hosts": ["h"], "slots": 2, "env": {"CUDA_VISIBLE_DEVICES": 0}, "log_dir": "~/x"}
    )
    # As `lakeshore providers add --config port=2222 …` sends them: scalars as strings.
    cli = {"hosts": ["h"], "port": "2222", "slots": "4", "connect_timeout_s": "2.5"}
    cfg = parse_config({**cli, "insecure_no_host_key_check": "true"})
    assert (cfg.port, cfg.slots, cfg.connect_timeout_s) == (2222, 4, 2.5)
    assert cfg.insecure_no_host_key_check is True


async def test_a_bad_config_is_refused_at_providers_add_with_400(fleet):
    for config, says in [
        ({"hosts": []}, "hosts is empty"),
        ({"hosts": ["gpu1"], "knwon_hosts": "/k"}, "no key 'knwon_hosts'; its keys are:"),
        ({"hosts": ["gpu1"], "known_hosts": None}, "would turn host key checking off"),
    ]:
        status, body = await fleet.api.post(
            f"{BASE}/providers", {"name": "bad", "kind": "ssh", "config": config}
        )
        assert (status, body["error"]["code"]) == (400, "invalid"), body
        assert says in body["error"]["message"]
    status, body = await fleet.api.get(f"{BASE}/providers/bad")
    assert status == 404
