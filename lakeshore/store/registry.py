"""Worker liveness in one statement: the registry's heartbeat writes.

The WorkerRegistry (the only writer of worker rows) keeps what heartbeats say in memory and
writes it here, many workers per statement: ``status``, ``current`` and ``last_heartbeat``
only, so a batch never undoes a change of membership, name or labels written meanwhile by
:meth:`~lakeshore.store.duckdb.Store.upsert_worker`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import duckdb

from lakeshore.model import Worker

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")

# One UPDATE joined with the unnested arrays: one statement (and one commit) for the whole
# fleet, where a row at a time costs a commit each.
_UPDATE_LIVENESS = """UPDATE workers
    SET status = v.status, current = v.current, last_heartbeat = v.last_heartbeat
    FROM (SELECT unnest(?::VARCHAR[]) AS id, unnest(?::VARCHAR[]) AS status,
                 unnest(?::VARCHAR[]) AS current, unnest(?::TIMESTAMPTZ[]) AS last_heartbeat) v
    WHERE workers.id = v.id"""


class RegistryQueries:
    """The coroutine face of this module, mixed into the store."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

    async def update_liveness(self, workers: Sequence[Worker]) -> None:
        """Overwrite ``status``, ``current`` and ``last_heartbeat`` of each worker, by id, in
        one statement; every other column is kept. A worker without a row is skipped.

        Args:
            workers: rows with distinct ids, as the registry holds them.
        """
        if not workers:
            return
        params = [
            [w.id for w in workers],
            [str(w.status) for w in workers],
            [w.current for w in workers],
            [w.last_heartbeat for w in workers],
        ]
        await self._run(lambda con: con.execute(_UPDATE_LIVENESS, params))
