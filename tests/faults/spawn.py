"""Starting a fault daemon with its own environment (a slow machine, a skewed clock), as one
of a :class:`conftest.Daemons` set, which stops it at teardown."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAKESHORE = str(Path(sys.executable).parent / "lakeshore")


async def start_daemon(
    daemons, name: str, queue: str, *, concurrency: int = 1, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """``lakeshore daemon run`` like ``daemons.start``, with ``env`` over the environment."""
    full = {**os.environ, "PYTHONPATH": str(HERE), "FAULTS_RUNS": str(daemons.runs), **(env or {})}
    proc = await asyncio.create_subprocess_exec(
        LAKESHORE,
        "daemon",
        "run",
        "--nats-url",
        daemons.nats_url,
        "--queue",
        queue,
        "--name",
        name,
        "--concurrency",
        str(concurrency),
        "--heartbeat-s",
        "0.2",
        "--drain-timeout-s",
        "5",
        env=full,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    daemons.procs[name] = proc
    return proc
