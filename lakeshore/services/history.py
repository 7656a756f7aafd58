"""HistoryService: history as data — a queue's points per interval, and the namespace's
invocation events as a Parquet file."""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from lakeshore.actors.base import ActorRef
from lakeshore.actors.directory import Lookup
from lakeshore.actors.queue import GetQueue
from lakeshore.errors import Invalid
from lakeshore.model import now
from lakeshore.model.history import QueueHistory
from lakeshore.services.queues import Settled
from lakeshore.store import Store
from lakeshore.store.history import bucket_start

#: The most points one history answer holds.
MAX_POINTS = 1000


@dataclass(frozen=True, slots=True)
class Export:
    """A Parquet file the caller streams, then removes with :meth:`remove`."""

    path: Path
    rows: int

    def remove(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)


class HistoryService:
    """Args:
    store: the history queries.
    directory: the queues' directory (an unknown queue is a 404).
    """

    def __init__(self, *, store: Store, directory: ActorRef[Any], settled: Settled) -> None:
        self._store, self._directory, self._settled = store, directory, settled

    async def queue_history(
        self, namespace: str, name: str, since_s: float, every_s: float
    ) -> QueueHistory:
        """One point per ``every_s`` interval over the last ``since_s`` seconds.

        Raises:
            Invalid: that would be more than :data:`MAX_POINTS` points.
            QueueNotFound: no such queue.
        """
        until = now()
        since = until - timedelta(seconds=since_s)
        count = math.floor((until - bucket_start(since, every_s)).total_seconds() / every_s) + 1
        if count > MAX_POINTS:
            raise Invalid(
                f"since {since_s:g}s every {every_s:g}s is {count} points, more than "
                f"{MAX_POINTS}; raise --every (every=) or shorten --since (since=)"
            )
        ref = await self._directory.ask(Lookup(namespace, name))
        row = await ref.ask(GetQueue())
        await self._settled()
        points = await self._store.queue_history(namespace, row.name, since, until, every_s)
        return QueueHistory(queue=row.name, namespace=namespace, every_s=every_s, points=points)

    async def export(self, namespace: str, queue: str | None, since_s: float) -> Export:
        """The namespace's (``queue``'s) events of the last ``since_s`` seconds, every
        column, in a new Parquet file (``env`` values are in no event: see
        :mod:`lakeshore.model.redact`)."""
        since = now() - timedelta(seconds=since_s)
        # A directory of the server user's alone (0700): the events name jobs and workers.
        path = Path(tempfile.mkdtemp(prefix="lakeshore-export-")) / "history.parquet"
        try:
            await self._settled()
            rows = await self._store.export_history(namespace, queue, since, path)
        except BaseException:
            shutil.rmtree(path.parent, ignore_errors=True)
            raise
        return Export(path=path, rows=rows)


__all__ = ["MAX_POINTS", "Export", "HistoryService"]
