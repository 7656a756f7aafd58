"""FleetService: daemons, their membership, providers and the controller's status.

Worker rows are the WorkerRegistry's, provider rows and daemon processes the Launcher's,
scaling the ControllerActor's; this service asks them, and tells a daemon directly (over
its control subject) when an order must reach it before its next heartbeat.
"""

from __future__ import annotations

from typing import Any

from lakeshore.actors.base import ActorRef
from lakeshore.actors.controller import Status
from lakeshore.actors.launcher import AddProvider, LaunchDaemons, RemoveProvider
from lakeshore.actors.workers import Beat, EditQueues, Register, RetireWorker
from lakeshore.bus.port import Bus
from lakeshore.errors import WorkerNotFound
from lakeshore.model import (
    ControllerStatus,
    DaemonControl,
    DaemonLaunch,
    Heartbeat,
    HeartbeatReply,
    Launched,
    MembershipEdit,
    Namespace,
    Provider,
    ProviderCreate,
    Worker,
    WorkerRegister,
)
from lakeshore.providers import find_provider, list_providers
from lakeshore.store import Store


class FleetService:
    """Args:
    store: worker and provider reads.
    bus: daemon control.
    workers, launcher, controller: the actors asked.
    """

    def __init__(
        self,
        *,
        store: Store,
        bus: Bus,
        workers: ActorRef[Any],
        launcher: ActorRef[Any],
        controller: ActorRef[Any],
    ) -> None:
        self._store, self._bus = store, bus
        self._workers, self._launcher, self._controller = workers, launcher, controller

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
    ) -> Worker:
        """Add and remove queues of a worker; it picks them up on its next heartbeat."""
        return await self._workers.ask(EditQueues(namespace, ref, edit.add, edit.remove, actor))

    async def retire(self, namespace: str, ref: str) -> Worker:
        """Have a worker finish its current run, then exit (told at once, and again in its
        heartbeat replies)."""
        worker = await self._workers.ask(RetireWorker(namespace, ref))
        await self._bus.send_control(namespace, worker.id, DaemonControl(retire=True))
        return worker

    async def register(self, reg: WorkerRegister) -> Worker:
        return await self._workers.ask(Register(reg))

    async def heartbeat(self, hb: Heartbeat) -> HeartbeatReply:
        return await self._workers.ask(Beat(hb))

    # ---- daemons and providers --------------------------------------------------------

    async def launch(self, namespace: str, request: DaemonLaunch, actor: str | None) -> Launched:
        """Launch daemons by hand (never ``managed``: only the controller's are)."""
        return await self._launcher.ask(LaunchDaemons(namespace, request, actor))

    async def add_provider(self, namespace: str, body: ProviderCreate) -> Provider:
        return await self._launcher.ask(AddProvider(namespace, body))

    async def remove_provider(self, namespace: str, name: str) -> Provider:
        return await self._launcher.ask(RemoveProvider(namespace, name))

    async def providers(self, ns: Namespace) -> list[Provider]:
        """The built-in ``local`` first, then the stored ones by name."""
        return await list_providers(self._store, ns)

    async def provider(self, ns: Namespace, name: str) -> Provider:
        return await find_provider(self._store, ns, name)

    # ---- the controller ---------------------------------------------------------------

    async def controller_status(self, namespace: str) -> ControllerStatus:
        return await self._controller.ask(Status(namespace))
