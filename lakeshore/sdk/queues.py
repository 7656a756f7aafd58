"""Routes of queues: their rows, state transitions, events and counters."""

from __future__ import annotations

from typing import Any

from lakeshore.model import Queue, QueueCreate, QueueDetail, QueueEvent, QueuePatch, QueueStats
from lakeshore.sdk.call import Call
from lakeshore.sdk.transport import Transport


class QueueRoutes(Transport):
    """The queues of a namespace."""

    def queues_ls(
        self, state: str | None = None, *, namespace: str | None = None
    ) -> Call[list[Queue]]:
        """Every queue of every namespace in the org (each with its ``namespace``)."""
        params = {"state": state} if state else None
        path = self._ns(namespace, "queues")
        return Call(self, list[Queue], "GET", path, key="queues", params=params)

    def queue_add(self, body: QueueCreate, *, namespace: str | None = None) -> Call[Queue]:
        """Create a queue."""
        return Call(self, Queue, "POST", self._ns(namespace, "queues"), json=body)

    def queue_show(self, name: str, *, namespace: str | None = None) -> Call[QueueDetail]:
        """A queue row with its current members."""
        return Call(self, QueueDetail, "GET", self._ns(namespace, "queues", name))

    def queue_patch(
        self, name: str, body: dict[str, Any] | QueuePatch, *, namespace: str | None = None
    ) -> Call[Queue]:
        """Change fields of a queue; a partial ``elasticity`` is merged into the current one."""
        return Call(self, Queue, "PATCH", self._ns(namespace, "queues", name), json=body)

    def _transition(self, name: str, verb: str, namespace: str | None) -> Call[Queue]:
        return Call(self, Queue, "POST", self._ns(namespace, "queues", name, verb))

    def queue_drain(self, name: str, *, namespace: str | None = None) -> Call[Queue]:
        """Stop admitting work; what is queued and in flight finishes."""
        return self._transition(name, "drain", namespace)

    def queue_archive(self, name: str, *, namespace: str | None = None) -> Call[Queue]:
        """Soft-delete: keep the row, admit nothing."""
        return self._transition(name, "archive", namespace)

    def queue_unarchive(self, name: str, *, namespace: str | None = None) -> Call[Queue]:
        """Back to ``active`` from ``draining`` or ``archived``."""
        return self._transition(name, "unarchive", namespace)

    def queue_rm(
        self, name: str, force: bool = False, *, namespace: str | None = None
    ) -> Call[dict[str, Any]]:
        """Delete a queue; ``force`` first scrubs it from every member's ``queues``.

        The answer is ``{"deleted": name, "namespace": ns, "scrubbed": [worker names]}``.
        """
        params = {"force": "true"} if force else None
        path = self._ns(namespace, "queues", name)
        return Call(self, dict[str, Any], "DELETE", path, params=params)

    def queue_events(
        self,
        name: str,
        verbose: bool = False,
        limit: int | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[list[QueueEvent]]:
        """Recorded changes of a queue, newest first; ``verbose`` adds each one's detail."""
        params: dict[str, str | int] = {"verbose": "true"} if verbose else {}
        if limit is not None:
            params["limit"] = limit
        path = self._ns(namespace, "queues", name, "events")
        return Call(self, list[QueueEvent], "GET", path, key="events", params=params or None)

    def queue_stats(self, name: str, *, namespace: str | None = None) -> Call[QueueStats]:
        """Counters of a queue: daemons, utilisation, pending and running work."""
        return Call(self, QueueStats, "GET", self._ns(namespace, "queues", name, "stats"))


__all__ = ["QueueRoutes"]
