"""Routes of the fleet: workers and their membership, launching daemons, providers, and the
controller's view of scaling."""

from __future__ import annotations

from typing import Any

from lakeshore.model import (
    BusAccess,
    ControllerStatus,
    DaemonAccess,
    DaemonJoin,
    DaemonLaunch,
    Launched,
    MembershipEdit,
    Provider,
    ProviderCreate,
    ProviderKind,
    Worker,
    WorkerEdited,
)
from lakeshore.sdk.call import Call
from lakeshore.sdk.transport import Transport, api_path


class FleetRoutes(Transport):
    """What runs the work: workers (daemons), the providers that start them, the controller."""

    # ---- workers ------------------------------------------------------------------------

    def workers_ls(self, *, namespace: str | None = None) -> Call[list[Worker]]:
        """The namespace's workers."""
        path = self._ns(namespace, "workers")
        return Call(self, list[Worker], "GET", path, key="workers")

    def worker_show(self, ref: str, *, namespace: str | None = None) -> Call[Worker]:
        """One worker, by id or name."""
        return Call(self, Worker, "GET", self._ns(namespace, "workers", ref))

    def worker_retire(
        self, ref: str, *, force: bool = False, namespace: str | None = None
    ) -> Call[Worker]:
        """Retire a worker: it finishes its current run, then exits; ``force``: its
        provider stops its process or job now (SIGTERM then SIGKILL, ``scancel``)."""
        params: dict[str, str | int] | None = {"force": "true"} if force else None
        return Call(self, Worker, "DELETE", self._ns(namespace, "workers", ref), params=params)

    def worker_queues(
        self,
        ref: str,
        add: list[str] | None = None,
        remove: list[str] | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[WorkerEdited]:
        """Edit a worker's membership; it takes effect on the worker's next poll.

        The answer is the worker row plus ``warnings``: an added queue that does not exist
        yet is kept (pulled from once created) and warned of (``queue_not_found: …``).
        """
        body = MembershipEdit(add=list(add or []), remove=list(remove or []))
        path = self._ns(namespace, "workers", ref, "queues")
        return Call(self, WorkerEdited, "POST", path, json=body)

    def worker_patch(
        self, ref: str, *, labels: dict[str, str] | None = None, namespace: str | None = None
    ) -> Call[Worker]:
        """Replace a worker's labels (``None``: left as they are); the daemon keeps running.
        ``compose up --adopt`` labels a hand-launched daemon as its project's this way."""
        body: dict[str, Any] = {}
        if labels is not None:
            body["labels"] = labels
        return Call(self, Worker, "PATCH", self._ns(namespace, "workers", ref), json=body)

    # ---- daemons and providers ----------------------------------------------------------

    def daemons_launch(self, body: DaemonLaunch, *, namespace: str | None = None) -> Call[Launched]:
        """Launch daemons on a provider; the answer's rows are ``starting`` until each
        daemon registers (poll :meth:`workers_ls` or :meth:`worker_show`).

        Raises:
            Conflict: a name is held by a live worker, or the provider is ``external``
                (its daemons are started by hand with ``lakeshore daemon run``).
        """
        return Call(self, Launched, "POST", self._ns(namespace, "daemons"), json=body)

    def daemons_join(
        self, worker_id: str | None = None, *, namespace: str | None = None
    ) -> Call[DaemonAccess]:
        """What a daemon needs to join over NATS: the URL(s), its worker id (``worker_id``,
        or a new one), a short-lived credential acting for this client's token, and the
        CA of NATS's certificate. ``lakeshore daemon run --api --token`` calls it."""
        path = self._ns(namespace, "daemons", "join")
        return Call(self, DaemonAccess, "POST", path, json=DaemonJoin(id=worker_id))

    def bus_access(self) -> Call[BusAccess]:
        """Where this client's fast path reaches NATS: the URL(s) and the CA (see
        :mod:`~lakeshore.sdk.fastpath`)."""
        return Call(self, BusAccess, "GET", api_path("bus"))

    def providers_add(
        self,
        name: str,
        kind: ProviderKind | str,
        config: dict[str, Any] | None = None,
        *,
        labels: dict[str, str] | None = None,
        namespace: str | None = None,
    ) -> Call[Provider]:
        """Add a provider (an unknown namespace is created in the caller's org)."""
        body = ProviderCreate(
            name=name, kind=ProviderKind(kind), config=dict(config or {}), labels=dict(labels or {})
        )
        return Call(self, Provider, "POST", self._ns(namespace, "providers"), json=body)

    def providers_patch(
        self,
        name: str,
        *,
        config: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None,
        namespace: str | None = None,
    ) -> Call[Provider]:
        """Replace a provider's config and/or labels (``None``: left as they are)."""
        body: dict[str, Any] = {}
        if config is not None:
            body["config"] = config
        if labels is not None:
            body["labels"] = labels
        return Call(self, Provider, "PATCH", self._ns(namespace, "providers", name), json=body)

    def providers_ls(self, *, namespace: str | None = None) -> Call[list[Provider]]:
        """The namespace's providers, the built-in ``local`` first."""
        path = self._ns(namespace, "providers")
        return Call(self, list[Provider], "GET", path, key="providers")

    def providers_show(self, name: str, *, namespace: str | None = None) -> Call[Provider]:
        """One provider."""
        return Call(self, Provider, "GET", self._ns(namespace, "providers", name))

    def providers_rm(self, name: str, *, namespace: str | None = None) -> Call[Provider]:
        """Delete a provider; the built-in ``local`` cannot be deleted (409)."""
        return Call(self, Provider, "DELETE", self._ns(namespace, "providers", name))

    # ---- controller ---------------------------------------------------------------------

    def controller_status(self, *, namespace: str | None = None) -> Call[ControllerStatus]:
        """The controller's last tick in the namespace: per queue and pool, the desired
        and actual managed daemons, those launching and the reason; the live steal leases.
        """
        return Call(self, ControllerStatus, "GET", self._ns(namespace, "controller"))


__all__ = ["FleetRoutes"]
