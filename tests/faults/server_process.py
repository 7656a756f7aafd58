"""``lakeshore server`` as its own process (with its embedded nats-server), for fault rows
that need the control plane apart from the test's event loop: a faked clock, or a load that
the test itself generates. It takes server settings and environment variables; rows that
kill the control plane or arm its fault points use ``server_proc.py``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

import natsauth

LAKESHORE = str(Path(sys.executable).parent / "lakeshore")


class ServerProcess:
    """One ``lakeshore server`` on free ports in ``data_dir``.

    Args:
        data_dir: its data dir; ``settings`` go to its ``server.toml``.
        settings: server settings by name (numbers and strings).
        env: variables set over this process's environment.
    """

    def __init__(
        self, data_dir: Path, settings: dict[str, Any], env: dict[str, str] | None = None
    ) -> None:
        self.data_dir, self.settings, self.env = data_dir, settings, env or {}
        self.proc: asyncio.subprocess.Process | None = None
        self.api = self.nats_url = ""
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> None:
        natsauth.seed(self.data_dir)
        toml = "".join(f"{k} = {v!r}\n" for k, v in self.settings.items()).replace("'", '"')
        (self.data_dir / "server.toml").write_text(toml)
        self.proc = await asyncio.create_subprocess_exec(
            LAKESHORE,
            "server",
            "--data-dir",
            str(self.data_dir),
            "--port",
            "0",
            "--nats-port",
            "0",
            env={**os.environ, **self.env},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert self.proc.stdout is not None
        seen: list[str] = []
        async with asyncio.timeout(60):
            while line := (await self.proc.stdout.readline()).decode():
                seen.append(line)
                if m := re.search(r"API (\S+), NATS (\S+)", line):
                    self.api, self.nats_url = m.group(1).rstrip(","), m.group(2)
                if "press Ctrl-C" in line:
                    break
        assert self.api, "lakeshore server did not start:\n" + "".join(seen[-30:])
        self.started_output = seen
        self._drain = asyncio.create_task(self._read_rest())

    async def _read_rest(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while await self.proc.stdout.readline():
            pass

    def token(self) -> str:
        return tomllib.loads((self.data_dir / "config.toml").read_text())["token"]

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            await self._drain
