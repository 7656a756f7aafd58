"""Worker liveness in one write: the registry's heartbeat writes.

The WorkerRegistry (the only writer of worker rows) keeps what heartbeats say in memory and
writes it here, many workers per write, only those that changed: ``status``, ``current``,
``running``, ``resources`` (their free part moves with the runs) and ``last_heartbeat``
only, so a batch never undoes a change of membership, name or labels written meanwhile by
:meth:`~lakeshore.store.duckdb.Store.upsert_worker`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import duckdb

from lakeshore.model import Worker
from lakeshore.store import images
from lakeshore.store._rows import to_json
from lakeshore.store.images import Image

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")

_ROWS = "WHERE id IN (SELECT unnest(?::VARCHAR[]))"


class RegistryQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:

        async def _write(self, plan: Callable[[Con], tuple[list[Image], T]]) -> T: ...

    async def update_liveness(self, workers: Sequence[Worker]) -> None:
        """Overwrite ``status``, ``current``, ``running``, ``resources`` and ``last_heartbeat``
        of each worker, by id, in one write; every other column is kept. A worker without a
        row is skipped.

        Args:
            workers: rows with distinct ids, as the registry holds them.
        """
        if not workers:
            return
        by_id = {w.id: w for w in workers}

        def plan(con: Con) -> tuple[list[Image], None]:
            changed = []
            for row in images.read_rows(con, "worker", _ROWS, [list(by_id)]):
                w = by_id[row["id"]]
                resources = None if w.resources is None else to_json(w.resources)
                live = {"status": str(w.status), "current": w.current,
                        "last_heartbeat": w.last_heartbeat, "running": to_json(w.running),
                        "resources": resources}  # fmt: skip
                if any(row[k] != v for k, v in live.items()):
                    changed.append(images.of_row("worker", {**row, **live}))
            return changed, None

        await self._write(plan)
