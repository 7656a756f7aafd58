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
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")
BENCH_DIR = Path(__file__).resolve().parent


@dataclass
class Server:
    api: str
    token: str
    nats_url: str
    data_dir: Path


@contextlib.asynccontextmanager
async def server() -> AsyncIterator[Server]:
    """``lakeshore server`` on free ports in a temporary data dir."""
    with tempfile.TemporaryDirectory(prefix="ls-bench-") as tmp:
        data = Path(tmp) / "data"
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
        async with asyncio.timeout(30):
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("lakeshore server exited")
                if m := re.search(r"API (\S+), NATS (\S+)", line):
                    api, nats_url = m.group(1).rstrip(","), m.group(2)
                if "press Ctrl-C" in line:
                    break
        drain = asyncio.create_task(_drain(proc))
        token = tomllib.loads((data / "config.toml").read_text())["token"]
        try:
            yield Server(api, token, nats_url, data)
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
    srv: Server, queue: str, count: int, concurrency: int
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """``count`` daemons on ``queue``, importable functions from ``bench/``."""
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR)}
    procs = [
        await asyncio.create_subprocess_exec(
            LAKESHORE,
            "daemon",
            "run",
            "--nats-url",
            srv.nats_url,
            "--queue",
            queue,
            "--name",
            f"bench-{i}",
            "--concurrency",
            str(concurrency),
            "--log-level",
            "WARNING",
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
