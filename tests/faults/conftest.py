"""Real daemons as processes, for the fault tests."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import natsauth
import pytest_asyncio

HERE = Path(__file__).resolve().parent
LAKESHORE = str(Path(sys.executable).parent / "lakeshore")


class Daemons:
    def __init__(self, nats_url: str, runs: Path, ca_pem: str | None = None) -> None:
        self.nats_url, self.runs, self.ca_pem = nats_url, runs, ca_pem
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(
        self, name: str, queue: str, concurrency: int = 1, *, env: dict[str, str] | None = None
    ) -> None:
        """``lakeshore daemon run`` on ``queue``, with ``env`` over the environment (a slow
        machine, a skewed clock)."""
        # Handed its credential as the control plane's local provider does.
        access = natsauth.daemon_access(self.nats_url, ca_pem=self.ca_pem)
        env = {
            **natsauth.daemon_env(access), "PYTHONPATH": str(HERE), "FAULTS_RUNS": str(self.runs),
            **(env or {}),
        }  # fmt: skip
        # Its log is kept beside the runs file, for a person reading a failure.
        log = open(self.runs.with_name(f"daemon-{name}.log"), "ab")  # noqa: SIM115
        self.procs[name] = await asyncio.create_subprocess_exec(
            LAKESHORE,
            "daemon",
            "run",
            "--nats-url",
            self.nats_url,
            "--id",
            access.worker_id,
            "--namespace",
            access.namespace,
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
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
        )
        log.close()  # the child has its own copy

    def signal(self, name: str, sig: int) -> None:
        self.procs[name].send_signal(sig)

    def executions(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        if self.runs.exists():
            for line in self.runs.read_text().splitlines():
                i = int(line.split()[0])
                counts[i] = counts.get(i, 0) + 1
        return counts

    async def stop_all(self) -> None:
        for p in self.procs.values():
            if p.returncode is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                await asyncio.wait_for(p.wait(), 15)
            except TimeoutError:
                p.kill()
                await p.wait()


@pytest_asyncio.fixture
async def daemons_for(tmp_path):
    made: list[Daemons] = []

    def make(nats_url: str, ca_pem: str | None = None) -> Daemons:
        d = Daemons(nats_url, tmp_path / f"runs-{len(made)}.txt", ca_pem)
        made.append(d)
        return d

    yield make
    for d in made:
        await d.stop_all()
