"""The waits that tests of a control plane's fleet share (the controller's, the ssh and
the slurm providers'): rows of workers, the managed daemons of a queue, its events."""

from __future__ import annotations

from typing import Any

from polling import eventually

from lakeshore.actors.workers import ListWorkers
from lakeshore.controller import QUEUE_LABEL
from lakeshore.model import Worker, WorkerStatus

#: Bound of every wait that is not about a specific duration (seconds).
WAIT_S = 20.0
UP = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})
GONE = frozenset({WorkerStatus.STOPPED, WorkerStatus.LOST})


class FleetWaits:
    """Mixed into a test bench that has ``plane`` (a started ``ControlPlane``) and works
    in namespace ``ns``."""

    plane: Any
    ns: str = "default"

    async def workers(self) -> list[Worker]:
        return await self.plane.parts.workers.ask(ListWorkers(self.ns))

    async def managed(self, queue: str, statuses: frozenset[WorkerStatus] = UP) -> list[Worker]:
        """Managed daemons launched for ``queue`` (its ``lakeshore.io/queue`` label)."""
        return [
            w
            for w in await self.workers()
            if w.managed and w.labels.get(QUEUE_LABEL) == queue and w.status in statuses
        ]

    async def wait_managed(
        self, queue: str, count: int, statuses: frozenset[WorkerStatus] = UP, placed: bool = False
    ) -> list[Worker]:
        """Once ``queue`` has ``count`` managed daemons in ``statuses`` (each with its
        provider's placement known, if ``placed``)."""
        return await eventually(
            lambda: self.managed(queue, statuses),
            until=lambda found: (
                len(found) == count and all(w.placement or not placed for w in found)
            ),
            timeout_s=WAIT_S,
            every_s=0.05,
            what=f"{count} managed daemons of queue {queue} in {sorted(statuses)}",
        )

    async def events(self, queue: str, type_: str) -> list[Any]:
        """``queue``'s events of ``type_``, oldest first."""
        rows = await self.plane.parts.store.list_queue_events(
            self.ns, queue, limit=500, verbose=True
        )
        return [e for e in reversed(rows) if e.type == type_]

    async def wait_events(self, queue: str, type_: str, count: int = 1) -> list[Any]:
        return await eventually(
            lambda: self.events(queue, type_),
            until=lambda found: len(found) >= count,
            timeout_s=WAIT_S,
            every_s=0.05,
            what=f"{count} {type_} events of queue {queue}",
        )
