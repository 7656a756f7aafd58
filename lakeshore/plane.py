"""The control plane's composition root: settings → NATS → store → actors → HTTP.

:meth:`ControlPlane.start` builds every piece once and passes each down explicitly;
:meth:`ControlPlane.stop` takes them down in the reverse order, each within a bound.
Restart is normal: every actor is rebuilt from DuckDB and every stream re-ensured.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from lakeshore import access
from lakeshore.access import Access
from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.controller import ControllerActor, Halt, Tick
from lakeshore.actors.directory import QueueDirectory
from lakeshore.actors.launcher import Launcher, exit_reporter
from lakeshore.actors.recorder import Recorder
from lakeshore.actors.workers import Sweep, WorkerRegistry
from lakeshore.bus.events import EventFeed
from lakeshore.bus.nats import NatsBus
from lakeshore.config import ServerSettings, read_toml, write_client_config
from lakeshore.controller import ControllerSettings
from lakeshore.embedded import NatsServer
from lakeshore.errors import LakeshoreError
from lakeshore.gateway import Gateway
from lakeshore.http.app import make_app
from lakeshore.model import ProviderKind, TokenCreated
from lakeshore.providers import ExternalProvider, LocalProvider
from lakeshore.providers import Provider as Backend
from lakeshore.store import Store, open_store

log = logging.getLogger(__name__)


def controller_settings(settings: ServerSettings) -> ControllerSettings:
    """The controller's part of the server settings."""
    return ControllerSettings(
        tick_s=settings.tick_s,
        max_surge=settings.max_surge,
        lost_after_s=settings.lost_after_s,
        steal_lease_ticks=settings.steal_lease_ticks,
    )


class ControlPlane:
    """Everything ``lakeshore server`` runs, in one process."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.nats: NatsServer | None = None
        self.nats_url = settings.nats_url or ""
        self.bus: NatsBus
        self.store: Store
        self.runtime = Runtime(ask_timeout_s=settings.ask_timeout_s)
        self.workers: ActorRef[Any]
        self.events: EventFeed
        self.recorder: ActorRef[Any]
        self.directory: ActorRef[Any]
        self.launcher: ActorRef[Any]
        self.controller: ActorRef[Any]
        #: the launcher's backends, one per provider kind; closed first by stop()
        self.providers: dict[ProviderKind, Backend] = {}
        self.access: Access
        self.admin_token: TokenCreated | None = None
        self.gateway: Gateway | None = None
        self._runner: web.AppRunner | None = None
        self.api = ""

    async def start(self) -> None:
        """Start NATS (embedded unless ``nats_url``), open the store, spawn the actors."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            if not self.settings.nats_url:
                self.nats = NatsServer(
                    self.data_dir / "nats",
                    port=self.settings.nats_port,
                    server_name="lakeshore-embedded",
                )
                await self.nats.start()
                self.nats_url = self.nats.url
            self.bus = await NatsBus.connect(
                self.nats_url, replicas=self.settings.replicas, ack_wait_s=self.settings.ack_wait_s
            )
            self.store = await open_store(self.data_dir / "lakeshore.duckdb")
            self.access = Access(self.store)
            self.admin_token = await self.access.bootstrap()
            # The events stream must exist before any queue actor publishes to it.
            self.events = EventFeed(self.bus.nc, replicas=self.settings.replicas)
            await self.events.ensure()
            self.recorder = await self.runtime.spawn(Recorder(self.store, self.events))
            self.workers = await self.runtime.spawn(
                WorkerRegistry(self.store, lost_after_s=self.settings.lost_after_s)
            )
            self.runtime.every(self.settings.heartbeat_s, self.workers, Sweep())
            self.providers = {
                ProviderKind.LOCAL: LocalProvider(
                    self.data_dir / "daemons",
                    exit_reporter(self.workers),
                    heartbeat_s=self.settings.heartbeat_s,
                ),
                ProviderKind.EXTERNAL: ExternalProvider(),
            }
            self.launcher = await self.runtime.spawn(
                Launcher(self.store, self.workers, self.providers, nats_url=self.nats_url)
            )
            self.controller = await self.runtime.spawn(
                ControllerActor(
                    store=self.store,
                    bus=self.bus,
                    workers=self.workers,
                    launcher=self.launcher,
                    settings=controller_settings(self.settings),
                )
            )
            self.runtime.every(self.settings.tick_s, self.controller, Tick())
            self.directory = await self.runtime.spawn(
                QueueDirectory(self.runtime, store=self.store, bus=self.bus, workers=self.workers)
            )
            self.gateway = Gateway(self)
            await self.gateway.start()
        except BaseException:
            await self.stop()
            raise

    async def serve(self) -> str:
        """Serve the HTTP API; returns its base URL (the real port when 0 was asked)."""
        self._runner = web.AppRunner(make_app(self), handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.api = f"http://{self.settings.host}:{port}"
        log.info("serving the API on %s", self.api)
        return self.api

    def write_client_config(self) -> Path:
        """Write ``<data-dir>/config.toml`` for the CLI and SDK on this machine.

        The admin secret exists only at the first start; later starts keep the token
        already in the file and refresh the addresses.
        """
        path = self.data_dir / "config.toml"
        token = self.admin_token.token if self.admin_token else None
        if token is None and path.exists():
            token = read_toml(path).get("token")
        write_client_config(
            path,
            api=self.api,
            token=token or "",
            namespace=access.DEFAULT_NAMESPACE,
            nats_url=self.nats_url,
        )
        return path

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        # The controller decides nothing more: it would replace the daemons stopped below.
        if hasattr(self, "controller"):
            try:
                await self.controller.ask(Halt())
            except LakeshoreError as e:
                log.warning("controller not halted: %s", e)
        # Daemons started here go first, while the gateway still records their last
        # heartbeat (``stopped``).
        for backend in self.providers.values():
            await backend.close()
        if self.gateway is not None:
            await self.gateway.stop()
        await self.runtime.shutdown()
        if hasattr(self, "bus"):
            await self.bus.close()
        if hasattr(self, "store"):
            await self.store.close()
        if self.nats is not None:
            await self.nats.stop()
