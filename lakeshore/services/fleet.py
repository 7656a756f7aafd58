"""FleetService: daemons, their membership, providers and the controller's status.

Worker rows are the WorkerRegistry's, provider rows and daemon processes the Launcher's,
scaling the ControllerActor's; this service asks them, and tells a daemon directly (over
its control subject) when an order must reach it before its next heartbeat.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lakeshore.actors.base import ActorRef
from lakeshore.actors.controller import Status
from lakeshore.actors.launcher import AddProvider, LaunchDaemons, RemoveProvider
from lakeshore.actors.workers import Beat, EditQueues, Register, RetireWorker
from lakeshore.bus.port import Bus
from lakeshore.errors import WorkerNotFound
from lakeshore.model import (
    DEFAULT_QUEUE,
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
    WorkerEdited,
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
