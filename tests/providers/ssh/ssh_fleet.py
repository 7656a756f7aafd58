"""A control plane with fast ticks, an ``ssh`` provider on the test sshd, and the waits the
ssh provider's tests share (``fleet`` in ``conftest.py`` builds one per test)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from fleet_waits import FleetWaits
from polling import eventually
from sshd import HOSTS, Sshd

from lakeshore.model import ProviderKind, Worker, WorkerStatus
from lakeshore.providers.ssh import SshProvider

NS = "default"
BASE = f"/v1/namespaces/{NS}"
#: The provider every test adds (``fleet.add_provider()``).
PROVIDER = "gpu"
#: Bound of every wait that is not about a specific duration (seconds).
WAIT_S = 20.0
#: Like the controller's tests: ticks and heartbeats every 0.2 s, lost after 2 s.
PLANE_SETTINGS = {"tick_s": 0.2, "heartbeat_s": 0.2, "lost_after_s": 2}
#: Where the daemons import the jobs the tests submit from (``scaling_jobs``).
JOBS_PATH = Path(__file__).parents[2] / "controller"
UP = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})
GONE = frozenset({WorkerStatus.STOPPED, WorkerStatus.LOST})


class Fleet(FleetWaits):
    """One test's control plane (restartable), its API, and the daemon dirs to clean."""

    def __init__(self, plane_factory: Any, sshd: Sshd, tmp_path: Path) -> None:
        self._factory, self.sshd, self.tmp_path = plane_factory, sshd, tmp_path
        self.gate = tmp_path / "gate"
        #: every directory a daemon of this test may keep its pid file in
        self.daemon_dirs: set[Path] = set()
        self._clients = contextlib.AsyncExitStack()
        self.handle: Any = None
        self.api: Any = None

    async def start(self, data_dir: Path | None = None) -> None:
        """(Re)start the control plane, on ``data_dir`` if given."""
        self.handle = await self._factory(data_dir=data_dir, **PLANE_SETTINGS)
        self.api = await self._clients.enter_async_context(self.handle.client())

    async def restart(self) -> None:
        """Stop the control plane and start a new one on its data dir."""
        data_dir = self.handle.data_dir
        await self.handle.stop()
        await self.start(data_dir)

    async def close(self) -> None:
        await self._clients.aclose()

    @property
    def plane(self) -> Any:
        return self.handle.plane

    @property
    def backend(self) -> SshProvider:
        return self.plane.parts.providers[ProviderKind.SSH]

    def config(self, hosts: Iterable[str] = HOSTS[:1], **overrides: Any) -> dict[str, Any]:
        """An ssh provider config on the test sshd (its log dir: this test's, unless a
        ``~/…`` one is given: then under each host's home)."""
        config: dict[str, Any] = {
            "hosts": list(hosts),
            "port": self.sshd.port,
            "user": self.sshd.user,
            "identity_file": str(self.sshd.client_key),
            "known_hosts": str(self.sshd.known_hosts),
            "python": sys.executable,
            "log_dir": str(self.tmp_path / "daemons"),
            "env": {"PYTHONPATH": str(JOBS_PATH)},
            **overrides,
        }
        log_dir = config.get("log_dir", "~/.lakeshore/daemons")
        if log_dir.startswith("~/"):
            self.daemon_dirs.update(home / log_dir[2:] for home in self.sshd.homes.values())
        else:
            self.daemon_dirs.add(Path(log_dir))
        return config

    async def add_provider(self, name: str = PROVIDER, **config: Any) -> dict[str, Any]:
        body = {"name": name, "kind": "ssh", "config": self.config(**config)}
        return await self.post("/providers", body)

    async def post(self, path: str, body: Any = None) -> Any:
        status, answer = await self.api.post(BASE + path, body)
        assert status in (200, 201, 202), answer
        return answer

    async def launch(
        self, name: str, queues: Iterable[str] = (), count: int = 1, provider: str = PROVIDER
    ) -> list[str]:
        """Launch daemons by hand; their worker ids."""
        body = {"name": name, "queues": list(queues), "count": count, "provider": provider}
        return [w["id"] for w in (await self.post("/daemons", body))["workers"]]

    async def queue(self, name: str, **elasticity: Any) -> None:
        await self.post("/queues", {"name": name, "elasticity": elasticity})

    async def submit(self, queue: str, fn: str, *args: Any, count: int = 1) -> list[str]:
        specs = [{"fn": f"scaling_jobs:{fn}", "args": list(args)}] * count
        return (await self.post(f"/queues/{queue}/invocations", {"invocations": specs}))["ids"]

    async def hold(self, queue: str, count: int) -> list[str]:
        """Submit ``count`` jobs that run until :meth:`release`."""
        return await self.submit(queue, "hold", str(self.gate), count=count)

    def release(self) -> None:
        self.gate.touch()

    async def wait_jobs(self, ids: Iterable[str], state: str = "succeeded") -> None:
        async def states() -> set[str]:
            return {(await self.api.get(f"{BASE}/jobs/{i}"))[1]["state"] for i in ids}

        await eventually(states, until=lambda s: s == {state}, timeout_s=WAIT_S, what="jobs")

    async def wait_worker(
        self, worker_id: str, statuses: frozenset[WorkerStatus], placed: bool = False
    ) -> Worker:
        """The worker's row once its status is one of ``statuses`` (and, if ``placed``,
        its placement is known)."""

        async def row() -> Worker | None:
            return next((w for w in await self.workers() if w.id == worker_id), None)

        return await eventually(
            row,
            until=lambda w: w is not None and w.status in statuses and (w.placement or not placed),
            timeout_s=WAIT_S,
            what=f"worker {worker_id} in {sorted(statuses)}",
        )

    async def until(self, cond: Callable[[], Awaitable[object]], what: str = "") -> None:
        await eventually(cond, timeout_s=WAIT_S, what=what)
