"""A real ``lakeshore server`` process for the fault rows that kill the control plane.

The approach of ``tests/test_server_process.py``: the CLI as a user runs it, its output
read until it says it is ready; killed by pid (SIGKILL) or by an armed fault point.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
import tomllib
from pathlib import Path

import aiohttp
import natsauth
from polling import eventually

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")
#: How long a start may take before the test fails (seconds).
START_TIMEOUT_S = 30.0


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(p) for p in path.read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class ServerProc:
    """``lakeshore server --data-dir DIR --port PORT`` (``port`` 0: a free one each start)
    with its embedded NATS (on ``nats_port``, 0: a free one each start) unless ``nats_url``
    is given; ``faults`` arms fault points (``point:exit``)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        nats_url: str | None = None,
        faults: str = "",
        nats_port: int = 0,
        port: int = 0,
    ) -> None:
        self.data_dir, self.nats_url_flag, self.faults = data_dir, nats_url, faults
        self.nats_port, self.port = nats_port, port
        self.proc: asyncio.subprocess.Process | None = None
        self.api = self.nats_url = ""
        self.output: list[str] = []
        self.ready_s = 0.0
        self._kids: list[int] = []
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> float:
        """Start and wait until ready; returns how long that took (seconds)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESHORE_")}
        # The suite's NATS secrets: for a NATS of the suite's, or seeded into the data dir
        # for the embedded one.
        env[natsauth.SECRETS_ENV] = str(natsauth.secrets_file())
        natsauth.seed(self.data_dir)
        if self.faults:
            env["LAKESHORE_FAULT_POINTS"] = self.faults
        nats = (
            ["--nats-url", self.nats_url_flag]
            if self.nats_url_flag
            else ["--nats-port", str(self.nats_port)]
        )
        began = time.monotonic()
        self.output = []
        self.proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            *("server", "--data-dir", str(self.data_dir), "--port", str(self.port), *nats),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    await self.proc.wait()
                    raise AssertionError(
                        f"server exited {self.proc.returncode}:\n" + "".join(self.output)
                    )
                self.output.append(line)
                if m := re.search(r"API (http://\S+), NATS (\S+)", line):
                    self.api, self.nats_url = m.group(1), m.group(2)
                if "press Ctrl-C to stop" in line:
                    break
        self.ready_s = time.monotonic() - began
        self._kids = children(self.proc.pid)
        self._drain = asyncio.create_task(self._read_rest())
        return self.ready_s

    async def _read_rest(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.output.append(line.decode())

    @property
    def token(self) -> str:
        return tomllib.loads((self.data_dir / "config.toml").read_text())["token"]

    @property
    def log(self) -> str:
        return "".join(self.output)

    async def died(self, timeout_s: float = 15.0) -> int:
        """Wait until the process (and its embedded NATS) is gone; its exit status."""
        assert self.proc is not None
        async with asyncio.timeout(timeout_s):
            code = await self.proc.wait()
        if self._drain is not None:
            await self._drain
        for kid in self._kids:
            await eventually(
                lambda kid=kid: not alive(kid), timeout_s=timeout_s, what=f"child {kid} gone"
            )
        return code

    async def kill(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        return await self.died()

    async def kill_with_nats(self) -> int:
        """SIGKILL the embedded nats-server and the server together: the NATS dies without
        the graceful stop it makes when its parent dies first (``PR_SET_PDEATHSIG``)."""
        assert self.proc is not None
        for pid in self._kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return await self.kill()

    async def stop(self) -> None:
        """SIGTERM (SIGKILL after 15 s) if it still runs; for teardown."""
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await self.died(15)
        except TimeoutError:
            await self.kill()


async def call(
    api: str, token: str | None, method: str, path: str, json: object = None, timeout_s: float = 30
) -> tuple[int, object]:
    """One HTTP call: ``(status, decoded body)``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s,
        s.request(method, api + path, json=json, headers=headers) as r,
    ):
        return r.status, await r.json(content_type=None)
