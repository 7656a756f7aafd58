"""The control plane's composition root: settings → NATS → store → actors → services → doors.

:meth:`ControlPlane.start` builds every piece once, passes each down explicitly, and
registers how to take it down as it goes; :meth:`ControlPlane.stop` unwinds that in
reverse, each step within a bound. The HTTP app and the NATS gateway get the
:class:`~lakeshore.services.Services`, never the plane. Restart is normal: every actor is
rebuilt from DuckDB and every stream re-ensured.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from lakeshore import __version__, access
from lakeshore.access import Access
from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.compaction import Compact, keep_s
from lakeshore.actors.controller import ControllerActor, Halt, Tick
from lakeshore.actors.directory import QueueDirectory
from lakeshore.actors.launcher import Launcher, exit_reporter, placement_reporter
from lakeshore.actors.recorder import Recorder
from lakeshore.actors.workers import Sweep, WorkerRegistry
from lakeshore.bus.connection import connect_nats
from lakeshore.bus.events import EventFeed
from lakeshore.bus.nats import NatsBus
from lakeshore.config import ServerSettings, read_toml, write_client_config
from lakeshore.controller import ControllerSettings
from lakeshore.datadir import secure_data_dir
from lakeshore.errors import LakeshoreError
from lakeshore.faults import Faults
from lakeshore.gateway import Gateway
from lakeshore.http.app import make_app
from lakeshore.http.errors import MAX_LINE_BYTES
from lakeshore.http.metrics import scrape_app
from lakeshore.metrics import PlaneMetrics, QueueGauges, QueueLabels
from lakeshore.model import DEFAULT_QUEUE, ProviderKind, TokenCreated
from lakeshore.providers import Backend, ExternalProvider, LocalProvider
from lakeshore.providers.slurm import SlurmProvider
from lakeshore.providers.ssh import SshProvider
from lakeshore.security.callout import CALLOUT_GROUP, CALLOUT_SUBJECT, Callout, Identities
from lakeshore.security.issuing import PLANE_TOKEN, DaemonAccessIssuer
from lakeshore.security.natsd import PlaneNats, start_nats
from lakeshore.security.sessions import Sessions
from lakeshore.services import FleetService, JobService, QueueService, Services
from lakeshore.services.backup import BackupService
from lakeshore.services.history import HistoryService
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


@dataclass(frozen=True, slots=True)
class Parts:
    """Everything a started control plane runs (for the plane itself, and for tests that
    look behind the API)."""

    bus: NatsBus
    events: EventFeed
    store: Store
    access: Access
    runtime: Runtime
    recorder: ActorRef[Any]
    workers: ActorRef[Any]
    launcher: ActorRef[Any]
    controller: ActorRef[Any]
    directory: ActorRef[Any]
    #: the launcher's backends, one per provider kind
    providers: dict[ProviderKind, Backend]
    services: Services
    #: who is connected to NATS as whom; cuts revoked tokens off
    sessions: Sessions
    #: what ``GET /metrics`` reports
    metrics: PlaneMetrics | None = None


class ControlPlane:
    """Everything ``lakeshore server`` runs, in one process."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.nats_url = settings.nats_url or ""
        self.admin_token: TokenCreated | None = None
        self.api = ""
        #: the ``metrics_port`` listener's ``/metrics`` URL (empty: none)
        self.metrics_url = ""
        self._stack = contextlib.AsyncExitStack()
        self._parts: Parts | None = None

    @property
    def parts(self) -> Parts:
        if self._parts is None:
            raise RuntimeError("the control plane is not started")
        return self._parts

    async def start(self) -> None:
        """Start NATS (embedded unless ``nats_url``), open the store, spawn the actors.

        On failure, whatever was started is stopped again before the error propagates.
        """
        try:
            self._parts = await self._build(self._stack)
        except BaseException:
            await self.stop()
            raise

    async def _build(self, stack: contextlib.AsyncExitStack) -> Parts:
        settings = self.settings
        faults = Faults(settings.fault_points)
        # The store, the daemons' logs and the NATS store hold arguments, commands and
        # their output: the data dir is the server user's alone.
        secure_data_dir(self.data_dir)
        # The store first: a second server on this data dir stops here (the file is
        # locked), before it starts a NATS server on the first one's NATS store.
        store = await open_store(self.data_dir / "lakeshore.duckdb")
        stack.push_async_callback(store.close)
        nats = await start_nats(settings, self.data_dir, stack)
        self.nats_url = nats.url
        bus = await NatsBus.connect(
            nats.url,
            nats.login(),
            replicas=settings.replicas,
            ack_wait_s=settings.ack_wait_s,
        )
        stack.push_async_callback(bus.close)
        gate = Access(store)
        self.admin_token = await gate.bootstrap()
        daemons, sessions = await _close_the_bus(nats, bus, gate, store, settings, stack)
        # The events stream must exist before any queue actor publishes to it.
        events = EventFeed(bus.nc, replicas=settings.replicas)
        await events.ensure()
        runtime = Runtime(
            ask_timeout_s=settings.ask_timeout_s,
            backoff_s=(settings.restart_backoff_s, 2.0, max(30.0, settings.restart_backoff_s)),
        )
        stack.push_async_callback(runtime.shutdown)
        metrics = PlaneMetrics(version=__version__)
        recorder = await runtime.spawn(
            Recorder(store, events, faults=faults, compactor=store, metrics=metrics.invocations)
        )
        retention = Compact(
            raw_keep_s=keep_s(settings.history_retention_days),
            minutes_keep_s=keep_s(settings.history_aggregate_retention_days),
        )
        runtime.every(settings.history_compact_every_s, recorder, retention)
        workers = await runtime.spawn(
            WorkerRegistry(
                store,
                lost_after_s=settings.lost_after_s,
                launch_timeout_s=settings.launch_timeout_s,
                quotas=settings.quotas,
            )
        )
        runtime.every(settings.heartbeat_s, workers, Sweep())
        labels = QueueLabels.parse(settings.metrics_per_queue)
        metrics.watch(QueueGauges(store=store, bus=bus, workers=workers, labels=labels))
        on_exit, on_placed = exit_reporter(workers), placement_reporter(workers)
        beat_s = settings.heartbeat_s
        providers: dict[ProviderKind, Backend] = {
            ProviderKind.LOCAL: LocalProvider(
                self.data_dir / "daemons", on_exit, heartbeat_s=beat_s
            ),
            ProviderKind.EXTERNAL: ExternalProvider(),
            ProviderKind.SSH: SshProvider(on_exit, on_placed, heartbeat_s=beat_s),
            ProviderKind.SLURM: SlurmProvider(
                self.data_dir / "daemons", on_exit, on_placed, heartbeat_s=beat_s
            ),
        }
        launcher = await runtime.spawn(
            Launcher(
                store,
                workers,
                providers,
                access=lambda w, org: daemons.issue(w.id, w.namespace, org, PLANE_TOKEN),
                quotas=settings.quotas,
            )
        )
        controller = await runtime.spawn(
            ControllerActor(
                store=store,
                bus=bus,
                workers=workers,
                launcher=launcher,
                settings=controller_settings(settings),
                metrics=metrics.controller,
            )
        )
        runtime.every(settings.tick_s, controller, Tick())
        directory = await runtime.spawn(
            QueueDirectory(
                runtime,
                store=store,
                bus=bus,
                workers=workers,
                key_ttl_s=settings.idempotency_ttl_s,
                faults=faults,
                on_created=sessions.regrant,
                quotas=settings.quotas,
            )
        )
        services = Services(
            access=gate,
            jobs=JobService(
                store=store,
                results=events,
                bus=bus,
                directory=directory,
                workers=workers,
                controller=controller,
                recorder=recorder,
                ask_timeout_s=settings.ask_timeout_s,
                metrics=metrics.invocations,
                quotas=settings.quotas,
            ),
            queues=QueueService(store=store, bus=bus, directory=directory, workers=workers),
            fleet=FleetService(
                store=store,
                bus=bus,
                workers=workers,
                launcher=launcher,
                controller=controller,
                daemons=daemons,
                quotas=settings.quotas,
            ),
            problems=lambda: _problems(bus, runtime),
            history=HistoryService(store=store, directory=directory),
            backup=BackupService(store=store, events=events),
        )
        gateway = Gateway(bus, access=gate, jobs=services.jobs, fleet=services.fleet)
        await gateway.start()
        # Unwound in reverse: the controller decides nothing more (it would replace the
        # daemons stopped next), then the daemons started here stop while the gateway still
        # records their last heartbeat (``stopped``), then the gateway, the actors, the bus.
        stack.push_async_callback(gateway.stop)
        for backend in providers.values():
            stack.push_async_callback(backend.close)
        stack.push_async_callback(_halt, controller)
        return Parts(
            bus=bus, events=events, store=store, access=gate, runtime=runtime,
            recorder=recorder, workers=workers, launcher=launcher, controller=controller,
            directory=directory, providers=providers, services=services, sessions=sessions,
            metrics=metrics,
        )  # fmt: skip

    async def serve(self) -> str:
        """Serve the HTTP API; returns its base URL (the real port when 0 was asked)."""
        runner = web.AppRunner(
            make_app(self.parts.services, self.parts.metrics),
            handle_signals=False,
            access_log=None,
            max_line_size=MAX_LINE_BYTES,
        )
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, self.settings.host, self.settings.port)
        await site.start()
        port = runner.addresses[0][1]
        self.api = f"http://{self.settings.host}:{port}"
        log.info("serving the API on %s", self.api)
        if self.settings.metrics_port is not None and self.parts.metrics is not None:
            self.metrics_url = await self._serve_metrics(self.parts.metrics)
        return self.api

    async def _serve_metrics(self, metrics: PlaneMetrics) -> str:
        """The ``metrics_port`` listener (no token); returns its ``/metrics`` URL."""
        runner = web.AppRunner(scrape_app(metrics), handle_signals=False, access_log=None)
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        host = self.settings.metrics_host
        await web.TCPSite(runner, host, self.settings.metrics_port).start()
        url = f"http://{host}:{runner.addresses[0][1]}/metrics"
        log.info("serving metrics on %s", url)
        return url

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
        """Stop everything started, in reverse order; a second call does nothing."""
        stack, self._stack = self._stack, contextlib.AsyncExitStack()
        await stack.aclose()


async def _close_the_bus(
    nats: PlaneNats,
    bus: NatsBus,
    gate: Access,
    store: Store,
    settings: ServerSettings,
    stack: contextlib.AsyncExitStack,
) -> tuple[DaemonAccessIssuer, Sessions]:
    """Answer NATS's auth callout, and cut off revoked tokens' connections."""
    issuer = nats.secrets.issuer
    daemons = DaemonAccessIssuer(
        issuer, gate, ttl_s=settings.credential_ttl_s, nats_url=nats.advertise, ca_pem=nats.ca_pem
    )

    async def queues_of(namespace: str) -> list[str]:
        rows = await store.list_queues([namespace], None)
        return [DEFAULT_QUEUE, *(q.name for q in rows)]

    identities = Identities(daemons, gate, queues_of)
    callout = await bus.respond(
        CALLOUT_SUBJECT, Callout(issuer, identities).answer, group=CALLOUT_GROUP
    )
    stack.push_async_callback(callout.unsubscribe)
    system = await connect_nats(nats.url, name="lakeshore-sys", login=nats.login(system=True))
    sessions = Sessions(system)
    stack.push_async_callback(sessions.close)
    gate.on_revoke(sessions.revoke_token)
    return daemons, sessions


async def _halt(controller: ActorRef[Any]) -> None:
    try:
        await controller.ask(Halt())
    except LakeshoreError as e:
        log.warning("controller not halted: %s", e)


def _problems(bus: NatsBus, runtime: Runtime) -> list[str]:
    """What ``/v1/healthz`` reports as wrong now."""
    out = [] if bus.connected else ["NATS is not connected"]
    return out + [f"actor {name} is down ({why})" for name, why in sorted(runtime.down().items())]
