"""`lakeshore server` as a user runs it: a real process with its embedded nats-server."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import sys
import tomllib
from pathlib import Path

import aiohttp
from polling import eventually

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")


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
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: asyncio.subprocess.Process | None = None
        self.api = ""
        self.output: list[str] = []

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            "server",
            "--data-dir",
            str(self.data_dir),
            "--port",
            "0",
            "--nats-port",
            "0",
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
