"""Shared set-up of the end-to-end benchmarks: a real `lakeshore server` and real daemons.

Everything runs as separate processes on this machine, as a user would run it: the
control plane (with its embedded nats-server) and each daemon. Nothing here is a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.client import Client as NatsClient

from lakeshore.actors.workers import new_worker_id
from lakeshore.embedded import NatsServer
from lakeshore.model import DaemonAccess
from lakeshore.security import serverauth
from lakeshore.security.issuing import PLANE_TOKEN, DaemonAccessIssuer
from lakeshore.security.natsd import SECRETS_FILE
from lakeshore.security.serverauth import NatsSecrets

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")
BENCH_DIR = Path(__file__).resolve().parent


@dataclass
class Server:
    api: str
    token: str
    nats_url: str
    data_dir: Path
    #: the ``lakeshore server`` process
    pid: int = 0
    #: seconds from the process's launch to its "ready" line
    ready_s: float = 0.0
    #: what it printed until then: (seconds since launch, line)
    startup: list[tuple[float, str]] = field(default_factory=list)

    def nats_pid(self) -> int | None:
        """The embedded nats-server (a child of the server process), if there is one."""
        for child in child_pids(self.pid):
            if b"nats-server" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        return None

    async def raw_nats(self) -> NatsClient:
        """A raw nats-py connection to this server's NATS, as its control plane logs in (the
        raw baselines run on the same closed bus)."""
        return await plane_nats(self.nats_url, serverauth.load(self.data_dir / SECRETS_FILE))


async def plane_nats(url: str, secrets: NatsSecrets) -> NatsClient:
    """Connect as the control plane's NATS user (every permission)."""
    return await nats.connect(url, nkeys_seed_str=secrets.plane_seed)


def closed_nats_server(directory: Path) -> tuple[NatsServer, NatsSecrets, Path]:
    """A nats-server (not started) with the closed bus: ``(server, secrets, secrets file)``."""
    secrets_file = directory / SECRETS_FILE
    secrets = serverauth.load_or_create(secrets_file)
    config = serverauth.write_server_config(directory / "nats.conf", secrets, None)
    return NatsServer(directory / "nats", config_file=config, port=0), secrets, secrets_file


def daemon_access(url: str, secrets: NatsSecrets, namespace: str = "default") -> DaemonAccess:
    """A daemon's NATS access, minted as the control plane's local provider does."""
    issuer = DaemonAccessIssuer(secrets.issuer, None, ttl_s=3600, nats_url=url, ca_pem=None)  # type: ignore[arg-type]
    return issuer.issue(new_worker_id(), namespace, "default", PLANE_TOKEN)


def child_pids(pid: int) -> list[int]:
    """The direct children of a process (Linux ``/proc``)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def rss_mib(pid: int | None) -> float | None:
    """Resident memory of a process in MiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    if pid is None:
        return None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


@contextlib.asynccontextmanager
async def server(
    data_dir: Path | None = None, start_timeout_s: float = 30
) -> AsyncIterator[Server]:
    """``lakeshore server`` on free ports, in ``data_dir`` (kept, so a later call restarts
    on it) or else in a temporary data dir."""
    with tempfile.TemporaryDirectory(prefix="ls-bench-") as tmp:
        data = data_dir or Path(tmp) / "data"
        launched = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            "server",
            "--data-dir",
            str(data),
            "--port",
            "0",
            "--nats-port",
            "0",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert proc.stdout is not None
        api = nats_url = ""
        said: list[tuple[float, str]] = []
        async with asyncio.timeout(start_timeout_s):
            while True:
                line = (await proc.stdout.readline()).decode()
                said.append((time.perf_counter() - launched, line))
                if not line:
                    last = "".join(text for _, text in said[-20:])
                    raise RuntimeError("lakeshore server exited:\n" + last)
                if m := re.search(r"API (\S+), NATS (\S+)", line):
                    api, nats_url = m.group(1).rstrip(","), m.group(2)
                if "press Ctrl-C" in line:
                    break
        ready_s = time.perf_counter() - launched
        drain = asyncio.create_task(_drain(proc))
        token = tomllib.loads((data / "config.toml").read_text())["token"]
        try:
            yield Server(api, token, nats_url, data, proc.pid, ready_s, startup=said)
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 20)
            drain.cancel()


async def _drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.readline():
        pass


@contextlib.asynccontextmanager
async def daemons(
    srv: Server, queue: str, count: int, concurrency: int, extra: tuple[str, ...] = ()
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """``count`` daemons on ``queue``, importable functions from ``bench/`` (``extra``: more
    flags of ``lakeshore daemon run``)."""
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR)}
    procs = [
        await asyncio.create_subprocess_exec(
            LAKESHORE,
            "daemon",
            "run",
            "--api",
            srv.api,
            "--token",
            srv.token,
            "--queue",
            queue,
            "--name",
            f"bench-{i}",
            "--concurrency",
            str(concurrency),
            "--log-level",
            "WARNING",
            *extra,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for i in range(count)
    ]
    try:
        yield procs
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        await asyncio.gather(*(asyncio.wait_for(p.wait(), 30) for p in procs))


async def wait_registered(client, names: list[str], timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            workers = {w.name: w for w in await client.workers_ls()}
            if all(n in workers and workers[n].status.value == "idle" for n in names):
                return
            await asyncio.sleep(0.05)
