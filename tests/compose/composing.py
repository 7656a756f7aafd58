"""Helpers of the compose tests: the CLI against a control plane, and the live state.

Import it by its bare name (``from composing import …``): pytest puts ``tests/compose`` on
``sys.path`` for the modules collected here.
"""

from __future__ import annotations

import clirunner
from clirunner import Invoke

from lakeshore.model import Provider, Queue, Worker, WorkerStatus
from lakeshore.sdk import Client

#: The spec's example (spec/compose.md), verbatim.
EXAMPLE = """\
namespace: default          # or a list under `namespaces:`
providers:
  my-gpu: {kind: ssh, config: {hosts: [gpu1, gpu2], user: lake, python: /opt/venv/bin/python}}
  my-hpc: {kind: slurm, config: {partition: gpu, gres: "gpu:1", time: "04:00:00"}}
queues:
  cpu-prep:      {kind: fifo, elasticity: {kind: fixed}}
  training-h100: {kind: priority, max_depth: 1000, on_full: reject,
                  elasticity: {kind: elastic, min: 1, max: 8, provider: my-gpu, pool: gpu}}
daemons:
  prep:  {provider: local, queues: [cpu-prep], count: 4}
  train: {provider: my-gpu, queues: [training-h100], count: 2, labels: {gpu: h100}}
"""

#: Bound on waiting for daemons to change state (register, stop).
DAEMON_WAIT_S = 30


def cli_for(plane) -> Invoke:
    """``await cli("compose", "up", expect=0)`` against ``plane``."""
    return clirunner.cli_for(plane)


class Live:
    """A control plane's state, read through the SDK."""

    def __init__(self, plane) -> None:
        self._plane = plane

    def client(self, namespace: str = "default") -> Client:
        return Client(self._plane.api, self._plane.admin_token, namespace)

    async def queues(self, namespace: str = "default") -> dict[str, Queue]:
        async with self.client(namespace) as c:
            return {q.name: q for q in await c.queues_ls() if q.namespace == namespace}

    async def providers(self, namespace: str = "default") -> dict[str, Provider]:
        async with self.client(namespace) as c:
            return {p.name: p for p in await c.providers_ls()}

    async def workers(self, namespace: str = "default") -> dict[str, Worker]:
        """Hand-launched workers that have not stopped, by name."""
        async with self.client(namespace) as c:
            rows = await c.workers_ls()
        return {w.name: w for w in rows if not w.managed and w.status != WorkerStatus.STOPPED}

    async def statuses(self, namespace: str = "default") -> dict[str, str]:
        """``{name: status}`` of :meth:`workers`."""
        return {name: str(w.status) for name, w in (await self.workers(namespace)).items()}


def plan_lines(text: str) -> list[str]:
    """The change lines of a printed plan (indented; not the headers or the count)."""
    return [line.strip() for line in text.splitlines() if line.startswith("  ")]
