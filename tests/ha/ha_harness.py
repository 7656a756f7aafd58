"""Several `lakeshore server` processes on one 3-node NATS cluster: the HA shape, for the
tests of tests/ha and for bench/failover.py.

Each control plane is a real process with its own data dir and a fixed port (so its URL
survives a restart); the tests kill them with real signals.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import duckdb

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")
#: The tables every replica projects the same (history aggregates and bookkeeping of the
#: Recorder's own consumer are each file's own).
PROJECTED = ("namespaces", "tokens", "queues", "workers", "providers", "queue_events",
             "idempotency_keys", "invocation_events")  # fmt: skip


@dataclass
class Plane:
    """One control plane: a `lakeshore server` process."""

    name: str
    data_dir: Path
    port: int
    proc: asyncio.subprocess.Process | None = None
    output: list[str] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, timeout_s: float = 60) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            "server",
            "--data-dir",
            str(self.data_dir),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"{self.name} exited:\n" + "".join(self.output[-40:]))
                self.output.append(line)
                if "press Ctrl-C to stop" in line:
                    break
        self._drain = asyncio.create_task(self._read_rest())

    async def _read_rest(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.output.append(line.decode())

    def send(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def kill(self) -> None:
        """SIGKILL, and wait until it is gone."""
        await self.stop(signal.SIGKILL)

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        if not self.running:
            return 0 if self.proc is None else self.proc.returncode or 0
        assert self.proc is not None
        self.proc.send_signal(sig)
        async with asyncio.timeout(timeout_s):
            code = await self.proc.wait()
        if self._drain is not None:
            await self._drain
        return code

    async def get(self, path: str, token: str | None = None) -> tuple[int, Any]:
        """``(status, JSON body)``; ``(0, reason)`` when nothing answers."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
                async with s.get(self.api + path, headers=headers) as r:
                    return r.status, await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as e:
            return 0, str(e)

    def tables_digest(self) -> dict[str, str]:
        """Each projected table's rows, sorted, hashed (the plane must be stopped)."""
        con = duckdb.connect(str(self.data_dir / "lakeshore.duckdb"), read_only=True)
        try:
            out = {}
            for table in PROJECTED:
                rows = sorted(map(repr, con.execute(f"SELECT * FROM {table}").fetchall()))
                out[table] = hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]
                out[table] += f"/{len(rows)}"
            return out
        finally:
            con.close()


class HA:
    """Control planes on ``cluster``; the first one started bootstraps the admin token."""

    def __init__(self, cluster: Any, tmp: Path, *, lease_ttl_s: int = 3) -> None:
        self.cluster, self.tmp, self.lease_ttl_s = cluster, tmp, lease_ttl_s
        self.planes: list[Plane] = []
        self.token = ""

    async def add(self, count: int = 1) -> list[Plane]:
        from nats_cluster import free_port

        made = []
        for _ in range(count):
            plane = Plane(f"cp{len(self.planes) + 1}", self.tmp / f"cp{len(self.planes) + 1}",
                          free_port())  # fmt: skip
            plane.data_dir.mkdir(parents=True)
            files = self.cluster.files
            (plane.data_dir / "server.toml").write_text(
                f'nats_url = "{self.cluster.url}"\n'
                f'nats_auth_file = "{files.secrets}"\n'
                f'nats_ca_file = "{files.ca}"\n'
                f"replicas = 3\n"
                f"port = {plane.port}\n"
                f"lease_ttl_s = {self.lease_ttl_s}\n"
            )
            self.planes.append(plane)
            await plane.start()
            if not self.token:
                import tomllib

                config = tomllib.loads((plane.data_dir / "config.toml").read_text())
                self.token = config["token"]
            made.append(plane)
        return made

    @property
    def urls(self) -> list[str]:
        return [p.api for p in self.planes]

    async def leader(self, timeout_s: float = 30, *, not_: Plane | None = None) -> Plane:
        """The one running plane whose /readyz answers 200 (other than ``not_``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for plane in self.planes:
                if plane is not_ or not plane.running:
                    continue
                status, _ = await plane.get("/readyz")
                if status == 200:
                    return plane
            if time.monotonic() > deadline:
                raise AssertionError(f"no leader within {timeout_s}s")
            await asyncio.sleep(0.05)

    async def epoch(self, plane: Plane) -> int:
        status, body = await plane.get("/readyz")
        assert status == 200, (status, body)
        return int(body["epoch"])

    async def stop(self) -> None:
        for plane in self.planes:
            await plane.stop()
