"""`lakeshore server` as a user runs it: a real process with its embedded nats-server (or
a nats-server of the test's), and the `local` daemons it starts — which must not outlive it
— and its stop, which no state of NATS may hold."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import tomllib
from pathlib import Path

import aiohttp
import natsauth
import pytest
from nats.js.errors import KeyNotFoundError
from polling import eventually

from lakeshore.bus import codec, subjects
from lakeshore.ids import new_id
from lakeshore.model import Invocation, now

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")
NS = "/v1/namespaces/default"


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def _wait_gone(pid: int, timeout_s: float) -> None:
    await eventually(
        lambda: not _alive(pid), timeout_s=timeout_s, every_s=0.05, what=f"pid {pid} gone"
    )


class Server:
    """``lakeshore server`` on free ports: its embedded NATS, or ``nats_url``'s (with the
    session's NATS secrets); ``settings`` go to its ``server.toml``."""

    def __init__(
        self, data_dir: Path, *, nats_url: str | None = None, settings: dict | None = None
    ) -> None:
        self.data_dir = data_dir
        self.nats_url = nats_url
        self.settings = settings or {}
        self.proc: asyncio.subprocess.Process | None = None
        self.api = ""
        self.output: list[str] = []

    async def start(self) -> None:
        if self.settings:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            toml = "".join(f"{k} = {v!r}\n" for k, v in self.settings.items())
            (self.data_dir / "server.toml").write_text(toml)
            (self.data_dir / "server.toml").chmod(0o600)
        nats = ["--nats-url", self.nats_url] if self.nats_url else ["--nats-port", "0"]
        self.proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            *("server", "--data-dir", str(self.data_dir), "--port", "0", *nats),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        async with asyncio.timeout(30):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError("server exited:\n" + "".join(self.output))
                self.output.append(line)
                if m := re.search(r"API (http://\S+),", line):
                    self.api = m.group(1)
                if "press Ctrl-C to stop" in line:
                    break
        self._drain = asyncio.create_task(self._read_rest())

    async def _read_rest(self) -> None:
        while line := await self.proc.stdout.readline():
            self.output.append(line.decode())

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10) -> int:
        self.proc.send_signal(sig)
        async with asyncio.timeout(timeout_s):
            code = await self.proc.wait()
        await self._drain
        return code

    def config(self) -> dict:
        return tomllib.loads((self.data_dir / "config.toml").read_text())


async def _call(api: str, token: str, method: str, path: str, json=None) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, api + path, json=json, headers={"Authorization": f"Bearer {token}"}) as r,
    ):
        return r.status, await r.json()


async def test_server_bootstraps_serves_and_shuts_down_with_its_nats(tmp_path):
    server = Server(tmp_path / "data")
    await server.start()
    try:
        config = server.config()
        assert config["api"] == server.api and config["namespace"] == "default"
        assert config["token"].startswith("lsk_")
        assert oct((server.data_dir / "config.toml").stat().st_mode & 0o777) == "0o600"
        assert (server.data_dir / "lakeshore.duckdb").exists()
        assert any(f"dashboard: {server.api}/ " in line for line in server.output)
        status, body = await _call(server.api, "", "GET", "/v1/healthz")
        assert status == 200
        status, body = await _call(
            server.api, config["token"], "POST", "/v1/namespaces/default/queues", {"name": "kept"}
        )
        assert status == 201
        await _call(server.api, config["token"], "POST", "/v1/namespaces/default/queues/kept/drain")
        nats_children = _children(server.proc.pid)
        assert len(nats_children) == 1
    finally:
        code = await server.stop()
    assert code == 0, "".join(server.output)
    await _wait_gone(nats_children[0], 5)

    again = Server(server.data_dir)
    await again.start()
    try:
        assert not any("admin token" in line for line in again.output)
        token = again.config()["token"]
        assert token == config["token"]
        status, body = await _call(again.api, token, "GET", "/v1/namespaces/default/queues/kept")
        assert status == 200 and body["state"] == "draining"
    finally:
        assert await again.stop() == 0


async def test_embedded_nats_dies_with_a_killed_server(tmp_path):
    server = Server(tmp_path / "data")
    await server.start()
    [nats_pid] = _children(server.proc.pid)
    await server.stop(signal.SIGKILL)
    await _wait_gone(nats_pid, 5)
    assert not _alive(nats_pid)


async def test_a_taken_nats_port_fails_the_start_and_names_the_flag(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            *("server", "--data-dir", str(tmp_path / "data"), "--port", "0"),
            *("--nats-port", str(port)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
    assert proc.returncode == 1, (out, err)
    [error] = [line for line in err.decode().splitlines() if line.startswith("error: ")]
    assert f"could not listen on 127.0.0.1:{port} (address in use" in error
    assert "--nats-port 0 for any free port" in error
    assert "Traceback" not in err.decode()


#: A daemon's bound of every NATS request (``request_timeout_s``'s default, seconds): the
#: heartbeat or claim in flight when NATS went, and the stop's last flush, each take one.
REQUEST_S = 5.0


def _daemon_pid(server_pid: int, worker_id: str) -> int:
    for pid in _children(server_pid):
        if worker_id in Path(f"/proc/{pid}/cmdline").read_text():
            return pid
    raise AssertionError(f"no child of {server_pid} runs worker {worker_id}")


async def _launched(server: Server, body: dict, *, registered: bool = True) -> tuple[dict, int]:
    """``POST …/daemons`` (one daemon): its row and its pid, once it has registered (or
    once its process runs)."""
    token = server.config()["token"]
    status, answer = await _call(server.api, token, "POST", f"{NS}/daemons", body)
    assert status == 202, answer
    [row] = answer["workers"]
    if registered:
        await eventually(
            lambda: _call(server.api, token, "GET", f"{NS}/workers/{row['name']}"),
            until=lambda got: got[1].get("status") in ("idle", "busy"),
            timeout_s=30,
            what=f"daemon {row['name']} registered",
        )
    pid = await eventually(
        lambda: _daemon_pid(server.proc.pid, row["id"]),
        retry_on=(AssertionError,),
        timeout_s=30,
        what=f"daemon {row['name']}'s process",
    )
    return row, pid


@pytest.mark.parametrize("registered", [True, False], ids=["registered", "starting"])
async def test_a_local_daemon_exits_once_its_killed_server_has_not_answered_for_orphan_after_s(
    tmp_path, registered
):
    orphan_s = 2.0
    server = Server(
        tmp_path / "data", settings={"heartbeat_s": 0.2, "local_orphan_after_s": orphan_s}
    )
    await server.start()
    _, pid = await _launched(server, {"name": "left"}, registered=registered)
    try:
        await server.stop(signal.SIGKILL)
        # Its NATS died with the server: the heartbeat (or claim) in flight times out, then
        # the next heartbeat; the stop's last steps are bounded by the same timeout.
        await _wait_gone(pid, orphan_s + 2 * REQUEST_S + 5)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    log = (server.data_dir / "daemons" / "default" / "left.log").read_text()
    assert "Traceback" not in log, log
    if registered:
        assert "no heartbeat answered for" in log and "the control plane is gone" in log, log
        assert "daemon left stopped" in log, log
    else:  # still joining when the server went: its wait for NATS (or the registry) ends
        assert "stopped before NATS" in log or "no registry answered" in log, log


async def test_a_daemon_whose_server_is_gone_stops_on_sigterm_within_its_drain_bound(
    tmp_path, nats_server_factory
):
    nats = await nats_server_factory()
    server = Server(tmp_path / "data", nats_url=nats.url, settings={"heartbeat_s": 0.2})
    await server.start()
    token = server.config()["token"]
    assert (await _call(server.api, token, "POST", f"{NS}/queues", {"name": "work"}))[0] == 201
    drain_s = 2.0
    access = natsauth.daemon_access(nats.url)
    log = tmp_path / "daemon.log"
    argv = [
        *("-m", "lakeshore", "daemon", "run", "--id", access.worker_id, "--name", "stuck"),
        *("--namespace", "default", "--queue", "work", "--nats-url", nats.url),
        *("--heartbeat-s", "0.2", "--drain-timeout-s", f"{drain_s:g}"),
    ]
    with log.open("wb") as out:
        daemon = await asyncio.create_subprocess_exec(
            sys.executable, *argv, env=natsauth.daemon_env(access), stdout=out, stderr=out
        )
    nc = await natsauth.plane_nats(nats.url)
    try:
        await eventually(
            lambda: "registered as stuck" in log.read_text(), timeout_s=30, what="registered"
        )
        await server.stop(signal.SIGKILL)
        # A run whose result was stored when NATS stopped taking its outcome's event (the
        # plane's NATS failing with it): the daemon waits for the event to be stored. (Its
        # output is too large to travel in the event: it is put in LS_RESULTS first.)
        js = nc.jetstream()
        await js.delete_stream(subjects.EVENTS_STREAM)
        printing = ["sh", "-c", "printf '%02000d' 0"]
        stray = Invocation(
            id=new_id(), namespace="default", queue="work", command=printing, submitted_at=now()
        )
        await js.publish(subjects.level_subject("default", "work", 0), codec.encode(stray))
        results = await js.key_value(subjects.RESULTS_BUCKET)
        await eventually(
            lambda: results.get(subjects.result_key("default", stray.id, 1)),
            retry_on=(KeyNotFoundError,),
            timeout_s=30,
            what="the run's result stored",
        )
        daemon.send_signal(signal.SIGTERM)
        async with asyncio.timeout(drain_s + 2 * REQUEST_S + 5):
            code = await daemon.wait()
    finally:
        await nc.close()
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()
    said = log.read_text()
    assert code == 0, said
    assert "the drain ran out of time before the succeeded event was stored" in said, said


async def test_servers_whose_nats_is_gone_stop_on_sigterm_within_their_stop_bound(
    tmp_path, nats_server_factory
):
    stop_s = 10.0
    nats = await nats_server_factory()
    settings = {"stop_timeout_s": stop_s, "lease_ttl_s": 1}
    leader = Server(tmp_path / "a", nats_url=nats.url, settings=settings)
    standby = Server(tmp_path / "b", nats_url=nats.url, settings=settings)
    servers = (leader, standby)
    try:
        await leader.start()
        await standby.start()
        assert any("standing by" in line for line in standby.output), standby.output
        await nats.kill()
        codes = await asyncio.gather(*(s.stop(timeout_s=stop_s + 5) for s in servers))
    finally:
        for s in servers:
            if s.proc is not None and s.proc.returncode is None:
                s.proc.kill()
                await s.proc.wait()
    for s, code in zip(servers, codes, strict=True):
        said = "".join(s.output)
        assert code == 0 and "Traceback" not in said, said


async def test_a_server_whose_nats_never_answers_stops_on_sigterm(tmp_path):
    with socket.socket() as nobody:
        nobody.bind(("127.0.0.1", 0))
        port = nobody.getsockname()[1]  # bound, never listening: connections are refused
        data = tmp_path / "data"
        data.mkdir(mode=0o700)
        (data / "server.toml").write_text("stop_timeout_s = 10\n")
        (data / "server.toml").chmod(0o600)
        proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            *("server", "--data-dir", str(data), "--port", "0"),
            *("--nats-url", f"nats://127.0.0.1:{port}"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            seen: list[str] = []
            async with asyncio.timeout(30):
                while not any("Connect call failed" in line for line in seen):
                    line = (await proc.stdout.readline()).decode()
                    assert line, "server exited:\n" + "".join(seen)
                    seen.append(line)
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):
                out, _ = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    said = "".join(seen) + out.decode()
    assert proc.returncode == 0, said
    assert "stopped before the control plane had started" in said and "Traceback" not in said
