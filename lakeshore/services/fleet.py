"""FleetService: daemons, their membership, providers and the controller's status.

Worker rows are the WorkerRegistry's, provider rows and daemon processes the Launcher's,
scaling the ControllerActor's; this service asks them, and tells a daemon directly (over
its control subject) when an order must reach it before its next heartbeat.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec

from lakeshore.access import Caller
from lakeshore.actors.base import ActorRef
from lakeshore.actors.controller import Status
from lakeshore.actors.launcher import (
    AddProvider,
    LaunchDaemons,
    PatchProvider,
    RemoveProvider,
    StopDaemon,
    check_labels,
)
from lakeshore.actors.workers import (
    Beat,
    EditQueues,
    Register,
    RetireWorker,
    SetLabels,
    new_worker_id,
)
from lakeshore.bus.port import Bus
from lakeshore.errors import Conflict, WorkerNotFound
from lakeshore.model import (
    DEFAULT_QUEUE,
    BusAccess,
    ControllerStatus,
    DaemonAccess,
    DaemonControl,
    DaemonJoin,
    DaemonLaunch,
    Heartbeat,
    HeartbeatReply,
    Launched,
    MembershipEdit,
    Namespace,
    NamespaceDetail,
    Provider,
    ProviderCreate,
    ProviderPatch,
    Worker,
    WorkerEdited,
    WorkerPatch,
    WorkerRegister,
    WorkerStatus,
    validate_name,
)
from lakeshore.providers import find_provider, list_providers
from lakeshore.quotas import DEFAULT_QUOTAS, Quotas
from lakeshore.security.issuing import DaemonAccessIssuer
from lakeshore.services.usage import namespace_quotas
from lakeshore.store import Store


class FleetService:
    """Args:
    store: worker and provider reads.
    bus: daemon control.
    workers, launcher, controller: the actors asked.
    daemons: mints and renews daemons' NATS credentials.
    quotas: the server's quotas (shown with a namespace).
    """

    def __init__(
        self,
        *,
        store: Store,
        bus: Bus,
        workers: ActorRef[Any],
        launcher: ActorRef[Any],
        controller: ActorRef[Any],
        daemons: DaemonAccessIssuer,
        quotas: Quotas = DEFAULT_QUOTAS,
        direct_submit: bool = False,
    ) -> None:
        self._store, self._bus = store, bus
        self._workers, self._launcher, self._controller = workers, launcher, controller
        self._daemons = daemons
        self._quotas = quotas
        self._direct_submit = direct_submit

    # ---- workers ----------------------------------------------------------------------

    async def list_workers(self, namespace: str) -> list[Worker]:
        return await self._store.list_workers(namespace)

    async def worker(self, namespace: str, ref: str) -> Worker:
        """A worker by id, else by name.

        Raises:
            WorkerNotFound: neither.
        """
        worker = await self._store.get_worker(namespace, ref)
        if worker is None:
            raise WorkerNotFound(namespace, ref)
        return worker

    async def edit_queues(
        self, namespace: str, ref: str, edit: MembershipEdit, actor: str | None
    ) -> WorkerEdited:
        """Add and remove queues of a worker; it picks them up on its next heartbeat.

        A queue added before it exists is kept (the worker pulls from it once it is
        created) and warned of: ``queue_not_found: …`` in the answer's ``warnings``.
        """
        worker = await self._workers.ask(EditQueues(namespace, ref, edit.add, edit.remove, actor))
        warnings = [
            f"queue_not_found: queue {name!r} does not exist in namespace {namespace!r} yet; "
            f"{worker.name} pulls from it once it is created (lakeshore queues add {name})"
            for name in dict.fromkeys(edit.add)
            if name != DEFAULT_QUEUE and await self._store.get_queue(namespace, name) is None
        ]
        return WorkerEdited(**msgspec.structs.asdict(worker), warnings=warnings)

    async def patch_worker(self, namespace: str, ref: str, patch: WorkerPatch) -> Worker:
        """Change a worker's row in place (its labels); the daemon is not told or restarted.

        Raises:
            Invalid: a label key a daemon could not be given (``--label KEY=VALUE``).
            WorkerNotFound: no worker by that id or name.
        """
        if patch.labels is None:
            return await self.worker(namespace, ref)
        check_labels(patch.labels)
        return await self._workers.ask(SetLabels(namespace, ref, patch.labels))

    async def retire(self, namespace: str, ref: str, *, force: bool = False) -> Worker:
        """Have a worker finish its current run, then exit (told at once, and again in its
        heartbeat replies).

        A daemon that has not registered yet (``starting``: a Slurm job still queued, a
        host still starting it) has its provider stop it where it waits. ``force`` has the
        provider stop the process or job now (SIGTERM, then SIGKILL; ``scancel``), for a
        daemon that does not answer.

        Raises:
            Conflict: ``force``, and no provider of this control plane runs the daemon
                (started by hand); nothing was changed.
        """
        if force:
            await self._launcher.ask(StopDaemon(namespace, ref))
        worker = await self._workers.ask(RetireWorker(namespace, ref))
        if not force and worker.status is WorkerStatus.RETIRING and worker.last_heartbeat is None:
            # Never heard from: nothing to tell over NATS yet, its provider holds it.
            with contextlib.suppress(Conflict):
                await self._launcher.ask(StopDaemon(namespace, worker.id))
        await self._bus.send_control(namespace, worker.id, DaemonControl(retire=True))
        return worker

    async def register(self, reg: WorkerRegister) -> Worker:
        return await self._workers.ask(Register(reg))

    async def heartbeat(self, hb: Heartbeat) -> HeartbeatReply:
        """The registry's answer, with a renewed credential when the daemon asked for one.

        Raises:
            Unauthorized: the credential to renew is not the daemon's, or its token was
                revoked.
        """
        renewed = None
        if hb.renew is not None:
            renewed = await self._daemons.renew(hb.renew, hb.worker_id, hb.namespace)
        reply = await self._workers.ask(Beat(hb))
        return reply if renewed is None else msgspec.structs.replace(reply, credential=renewed)

    def bus_access(self) -> BusAccess:
        """Where the SDK's fast path reaches NATS (the same URL and CA daemons are given)."""
        return BusAccess(
            nats_url=self._daemons.nats_url,
            ca_pem=self._daemons.ca_pem,
            direct_submit=self._direct_submit,
        )

    async def join(self, caller: Caller, ns: Namespace, body: DaemonJoin) -> DaemonAccess:
        """A daemon's way onto NATS: its worker id (the one given, or a new one) and a
        credential acting for ``caller``'s token in ``ns``."""
        worker_id = validate_name("worker id", body.id) if body.id else new_worker_id()
        return self._daemons.issue(worker_id, ns.name, ns.org, caller.token_id)

    # ---- daemons and providers --------------------------------------------------------

    async def launch(self, namespace: str, request: DaemonLaunch, actor: str | None) -> Launched:
        """Launch daemons by hand (never ``managed``: only the controller's are)."""
        return await self._launcher.ask(LaunchDaemons(namespace, request, actor))

    async def add_provider(self, namespace: str, body: ProviderCreate) -> Provider:
        return await self._launcher.ask(AddProvider(namespace, body))

    async def patch_provider(self, namespace: str, name: str, body: ProviderPatch) -> Provider:
        return await self._launcher.ask(PatchProvider(namespace, name, body))

    async def remove_provider(self, namespace: str, name: str) -> Provider:
        return await self._launcher.ask(RemoveProvider(namespace, name))

    async def providers(self, ns: Namespace) -> list[Provider]:
        """The built-in ``local`` first, then the stored ones by name."""
        return await list_providers(self._store, ns)

    async def provider(self, ns: Namespace, name: str) -> Provider:
        return await find_provider(self._store, ns, name)

    # ---- namespaces -------------------------------------------------------------------

    async def namespace(self, ns: Namespace) -> NamespaceDetail:
        """``ns`` with each quota and what it, or its org, uses of it now."""
        usage = await namespace_quotas(
            ns,
            limits=self._quotas,
            store=self._store,
            bus=self._bus,
            workers=self._workers,
            launcher=self._launcher,
        )
        return NamespaceDetail(**msgspec.structs.asdict(ns), quotas=usage)

    # ---- the controller ---------------------------------------------------------------

    async def controller_status(self, namespace: str) -> ControllerStatus:
        return await self._controller.ask(Status(namespace))
