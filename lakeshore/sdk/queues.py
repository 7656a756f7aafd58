"""Routes of queues: their rows, state transitions, events and counters."""

from __future__ import annotations

from typing import Any

from lakeshore.model import (
    Queue,
    QueueCreate,
    QueueDetail,
    QueueEvent,
    QueuePage,
    QueuePatch,
    QueueStats,
)
from lakeshore.sdk.call import Call, PagedCall
from lakeshore.sdk.transport import Transport

#: Queues per request when :meth:`QueueRoutes.queues_ls` reads every page (the most a page
#: may hold: fewest round trips).
LS_PAGE = 1000


class QueueRoutes(Transport):
    """The queues of a namespace."""

    def queues_ls(
        self, state: str | None = None, *, namespace: str | None = None
    ) -> Call[list[Queue]]:
        """Every queue of every namespace in the org (each with its ``namespace``), by
        namespace then name; read in pages of :data:`LS_PAGE`."""
        params = {"state": state} if state else None
        path = self._ns(namespace, "queues")
        return PagedCall(self, list[Queue], "GET", path, key="queues", params=params, page=LS_PAGE)

    def queues_page(
        self,
        state: str | None = None,
        limit: int = 100,
        after: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[QueuePage]:
        """One page of :meth:`queues_ls`.

        Args:
            limit: at most this many, 1–1000.
            after: the ``next`` of the previous page (``None``: the first page).

        Returns:
            The page's queues and the ``next`` to read the page after it (``None`` after
            the last page).
        """
        given = {"state": state, "limit": limit, "after": after}
        params: dict[str, str | int] = {k: v for k, v in given.items() if v is not None}
        path = self._ns(namespace, "queues")
        return Call(self, QueuePage, "GET", path, params=params)

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


__all__ = ["LS_PAGE", "QueueRoutes"]
