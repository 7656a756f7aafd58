"""Routes of history as data: a queue's points per interval, the Parquet export."""

from __future__ import annotations

from pathlib import Path

from lakeshore.model.history import QueueHistory
from lakeshore.sdk.call import Call
from lakeshore.sdk.transport import Transport


class HistoryRoutes(Transport):
    """A queue's history per interval, and the namespace's invocation events as a file."""

    def queue_history(
        self, name: str, since: str = "1h", every: str = "1m", *, namespace: str | None = None
    ) -> Call[QueueHistory]:
        """Submitted, started, succeeded and failed counts and wait/run percentiles, one
        point per ``every`` over the last ``since`` (durations like ``30s 5m 1h 2d``; at
        most 1,000 points)."""
        path = self._ns(namespace, "queues", name, "history")
        return Call(self, QueueHistory, "GET", path, params={"since": since, "every": every})

    async def history_export(
        self,
        dest: Path,
        since: str = "1d",
        queue: str | None = None,
        *,
        namespace: str | None = None,
    ) -> tuple[int, int]:
        """Save the namespace's (``queue``'s) invocation events of the last ``since`` to
        ``dest`` as Parquet (every column; ``env`` values are in no event).

        Returns:
            The rows and the bytes written.

        Raises:
            LakeshoreError: as :meth:`~lakeshore.sdk.transport.Transport.request`; ``dest``
                is not created then.
        """
        params: dict[str, str | int] = {"since": since}
        if queue is not None:
            params["queue"] = queue
        path = self._ns(namespace, "history.parquet")
        headers = await self.download(path, dest, params=params)
        return int(headers.get("X-Lakeshore-Rows", "0")), dest.stat().st_size


__all__ = ["HistoryRoutes"]
