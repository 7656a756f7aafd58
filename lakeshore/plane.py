"""The control plane's composition root: settings → NATS → store → actors → services → doors.

:meth:`ControlPlane.start` builds every piece once, passes each down explicitly, and
registers how to take it down as it goes; :meth:`ControlPlane.stop` unwinds that in
reverse, each step within a bound. The HTTP app and the NATS gateway get the
:class:`~lakeshore.services.Services`, never the plane. Restart is normal: every actor is
rebuilt from DuckDB and every stream re-ensured.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats.errors
from aiohttp import web

from lakeshore import __version__, access
from lakeshore.access import Access
from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.compaction import Compact, keep_s
from lakeshore.actors.controller import ControllerActor, Halt, Tick
from lakeshore.actors.directory import QueueDirectory
from lakeshore.actors.launcher import Launcher, exit_reporter, placement_reporter
from lakeshore.actors.outbox import LINGER_S, Outbox
from lakeshore.actors.recorder import Recorder, Unrecorded
from lakeshore.actors.workers import Sweep, WorkerRegistry
from lakeshore.bus.connection import connect_nats
from lakeshore.bus.events import EventFeed
from lakeshore.bus.lease import Elector, Lease, ensure_bucket
from lakeshore.bus.logs import LogTails, ensure_logs_stream
from lakeshore.bus.nats import NatsBus
from lakeshore.bus.state import StateLog, StateTail, ensure_state_stream
from lakeshore.bus.subjects import (
    EVENTS_STREAM,
    RECORDER_CONSUMER,
    STATE_STREAM,
    stored_wildcard,
)
from lakeshore.config import ServerSettings, read_toml, write_client_config
from lakeshore.controller import ControllerSettings
from lakeshore.datadir import secure_data_dir
from lakeshore.errors import LakeshoreError, Unavailable
from lakeshore.faults import Faults
from lakeshore.gateway import Gateway
from lakeshore.http.app import make_app
from lakeshore.http.deadlines import GuardedRunner, ReadTimeouts
from lakeshore.http.doors import Doors
from lakeshore.http.metrics import scrape_app
from lakeshore.http.standby import leading_middleware, standby_app
from lakeshore.metrics import PlaneMetrics, QueueGauges, QueueLabels
from lakeshore.model import DEFAULT_QUEUE, ProviderKind, TokenCreated
from lakeshore.providers import Backend, ExternalProvider, LocalProvider
from lakeshore.providers.capacity import Demand
from lakeshore.providers.local import daemon_flags
from lakeshore.providers.slurm import SlurmProvider
from lakeshore.providers.ssh import SshProvider
from lakeshore.replica.identity import LeaderUrl, advertised_api, read_replica_id
from lakeshore.replica.projector import LeaderWrites, Projector, StandbyWrites, seed
from lakeshore.security.callout import (
    CALLOUT_GROUP,
    CALLOUT_REPLIES,
    CALLOUT_SUBJECT,
    Callout,
    Identities,
)
from lakeshore.security.issuing import PLANE_TOKEN, DaemonAccessIssuer
from lakeshore.security.natsd import PlaneNats, start_nats
from lakeshore.security.replies import SteeredReplies
from lakeshore.security.sessions import Sessions
from lakeshore.services import FleetService, JobService, QueueService, Services
from lakeshore.services.backup import BackupService
from lakeshore.services.code import CodeService, Retention, usage_in
from lakeshore.services.history import HistoryService
from lakeshore.services.logs import LogService
from lakeshore.services.lost_runs import LostRuns
from lakeshore.services.stored import StoredNotes
from lakeshore.services.unrecorded import announce_in_background
from lakeshore.shutdown import STEP_S, StopStack
from lakeshore.store import Store, open_store

log = logging.getLogger(__name__)

#: How long ``start`` waits to lead, or to see another plane lead (seconds).
SETTLE_TIMEOUT_S = 60.0
#: How long a new leader waits for its file to apply the stream up to its epoch (seconds).
CATCH_UP_TIMEOUT_S = 300.0
#: JetStream API timeouts of the lease's and the state log's requests (seconds).
LEASE_API_TIMEOUT_S = 1.0
STATE_API_TIMEOUT_S = 3.0
#: JetStream API timeout of the code buckets (a 100 MiB snapshot is stored in 256 KiB chunks).
CODE_API_TIMEOUT_S = 30.0
#: Idempotency keys stay in the state stream this much longer than they name an
#: invocation (seconds), so no replica's file drops one before its time.
KEY_TTL_MARGIN_S = 3600


def controller_settings(settings: ServerSettings) -> ControllerSettings:
    """The controller's part of the server settings."""
    return ControllerSettings(
        tick_s=settings.tick_s,
        max_surge=settings.max_surge,
        lost_after_s=settings.lost_after_s,
        steal_lease_ticks=settings.steal_lease_ticks,
    )


@dataclass(frozen=True, slots=True)
class Replica:
    """What every control plane runs, leader or standby: its file and the projections
    that keep it up with the streams, and its candidacy for the lease."""

    store: Store
    bus: NatsBus
    nats: PlaneNats
    events: EventFeed
    runtime: Runtime
    recorder: ActorRef[Any]
    state: StateLog
    projector: Projector
    lease: Lease
    metrics: PlaneMetrics


@dataclass(frozen=True, slots=True)
class Parts:
    """Everything a leading control plane runs (for the plane itself, and for tests that
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
    #: the leadership term's epoch (strictly greater than every earlier leader's)
    epoch: int = 0


class ControlPlane:
    """Everything ``lakeshore server`` runs, in one process.

    Every control plane keeps its own DuckDB file up with the replicated streams (the
    :class:`Replica`) and campaigns for the leader lease; the one that holds it runs the
    actors, the gateway and the API (the :class:`Parts` of its term), the others answer
    ``503 not_leader`` with its URL. Alone (the embedded default) a control plane is
    elected as it starts.
    """

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.nats_url = settings.nats_url or ""
        self.admin_token: TokenCreated | None = None
        self.api = ""
        #: the ``metrics_port`` listener's ``/metrics`` URL (empty: none)
        self.metrics_url = ""
        # Every step of a stop is bounded (a NATS that is gone must not hold it), by a
        # part of ``stop_timeout_s`` when that is short.
        self._step_s = min(STEP_S, settings.stop_timeout_s / 2)
        self._stack = StopStack(self._step_s)
        self._replica: Replica | None = None
        self._parts: Parts | None = None
        self._term: contextlib.AsyncExitStack | None = None
        self._doors: Doors | None = None
        self._roles: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._leader_url = LeaderUrl()
        self._standby_app = standby_app(self._leader_url.get, self._applied, self._own_url)
        #: what the API serves now: the leader's app, or the standby's
        self._app = self._standby_app

    @property
    def parts(self) -> Parts:
        if self._parts is None:
            raise RuntimeError("the control plane is not started, or does not lead")
        return self._parts

    @property
    def replica(self) -> Replica:
        if self._replica is None:
            raise RuntimeError("the control plane is not started")
        return self._replica

    @property
    def leading(self) -> bool:
        return self._parts is not None

    async def leader_url(self) -> str | None:
        """The leader's API URL (this plane's own when it leads)."""
        return await self._leader_url.get()

    def _applied(self) -> int:
        return 0 if self._replica is None else self._replica.store.state_position

    def _own_url(self) -> str | None:
        """The API URL this plane's lease advertises (``None`` before it serves)."""
        return None if self._replica is None else self._replica.lease.url or None

    async def start(self) -> None:
        """Start NATS (embedded unless ``nats_url``), open the store, follow the streams,
        campaign; return once this plane leads, or another does.

        On failure, whatever was started is stopped again before the error propagates.
        """
        try:
            self._replica = await self._build_replica(self._stack)
            await self._settle()
        except BaseException:
            await self.stop()
            raise

    async def _build_replica(self, stack: contextlib.AsyncExitStack) -> Replica:
        settings = self.settings
        # The store, the daemons' logs and the NATS store hold arguments, commands and
        # their output: the data dir is the server user's alone.
        secure_data_dir(self.data_dir)
        # The store first: a second server on this data dir stops here (the file is
        # locked), before it starts a NATS server on the first one's NATS store.
        store = await open_store(self.data_dir / "lakeshore.duckdb")
        stack.push_async_callback(store.close)
        store.key_ttl_s = int(settings.idempotency_ttl_s) + KEY_TTL_MARGIN_S
        store.write_through(StandbyWrites())
        nats = await start_nats(settings, self.data_dir, stack)
        self.nats_url = nats.url
        bus = await NatsBus.connect(
            nats.url,
            nats.login(),
            replicas=settings.replicas,
            ack_wait_s=settings.ack_wait_s,
        )
        stack.push_async_callback(bus.close)
        js = bus.nc.jetstream(timeout=5)
        await _ensure(ensure_state_stream(js, replicas=settings.replicas), "the state stream")
        await _ensure(ensure_bucket(js, replicas=settings.replicas), "the leader lease")
        replica_id = read_replica_id(self.data_dir)
        state = StateLog(
            bus.nc.jetstream(timeout=STATE_API_TIMEOUT_S),
            key_ttl_s=store.key_ttl_s,
            on_full=bus.give_up_reserve,
        )
        projector = Projector(store, StateTail(bus.nc), js)
        await _ensure(projector.start(), "the state projector")
        stack.push_async_callback(projector.stop)
        # The events stream must exist before any queue actor publishes to it. Each
        # control plane projects it into its own file through a consumer of its own.
        events = EventFeed(
            bus.nc,
            replicas=settings.replicas,
            consumer=f"{RECORDER_CONSUMER}-{replica_id}",
            start_after=await store.events_position(),
        )
        await events.ensure()
        await _ensure(
            ensure_logs_stream(
                js, max_age_s=settings.log_retention_days * 86400.0, replicas=settings.replicas
            ),
            "the logs stream",
        )
        runtime = Runtime(
            ask_timeout_s=settings.ask_timeout_s,
            backoff_s=(settings.restart_backoff_s, 2.0, max(30.0, settings.restart_backoff_s)),
        )
        stack.push_async_callback(runtime.shutdown)
        metrics = PlaneMetrics(version=__version__)
        recorder = await runtime.spawn(
            Recorder(store, events, compactor=store, metrics=metrics.invocations,
                     faults=Faults(settings.fault_points))
        )  # fmt: skip
        retention = Compact(
            raw_keep_s=keep_s(settings.history_retention_days),
            minutes_keep_s=keep_s(settings.history_aggregate_retention_days),
        )
        runtime.every(settings.history_compact_every_s, recorder, retention)
        # Short JetStream timeouts for the lease: a candidate asks again every tenth of a
        # second, and a lost NATS node must not hold a campaign for seconds per attempt.
        lease = Lease(
            bus.nc.jetstream(timeout=LEASE_API_TIMEOUT_S), replica_id, settings.api_url or "",
            settings.lease_ttl_s, replicas=settings.replicas, on_full=bus.give_up_reserve,
        )  # fmt: skip
        self._leader_url.lease = lease
        stack.push_async_callback(self._leader_url.close)
        # Unwound in reverse: a stopping leader ends its term while it still holds the
        # lease (its last writes, e.g. daemons' final heartbeats, are still taken), then
        # resigns, so a standby takes over at once rather than after the lease's TTL.
        elector = Elector(lease, on_elected=self._elected, on_deposed=self._deposed)
        await stack.enter_async_context(elector)
        roles = asyncio.create_task(self._follow_roles(), name="roles")
        stack.push_async_callback(self._stop_roles, roles)
        return Replica(
            store=store, bus=bus, nats=nats, events=events, runtime=runtime, recorder=recorder,
            state=state, projector=projector, lease=lease, metrics=metrics,
        )  # fmt: skip

    async def _settle(self) -> None:
        """Wait until this plane leads, or another plane holds the lease."""
        lease = self.replica.lease
        async with asyncio.timeout(SETTLE_TIMEOUT_S):
            while self._parts is None:
                try:
                    holder = await lease.leader()
                except nats.errors.TimeoutError:  # a loaded NATS: ask again, within the bound
                    log.info("the leader lease did not answer within %.1f s; asking again",
                             LEASE_API_TIMEOUT_S)  # fmt: skip
                    continue
                if holder is not None and holder.holder_id != lease.holder_id:
                    who = holder.url or f"control plane {holder.holder_id}"
                    log.info("standing by: %s leads (epoch %d)", who, holder.epoch)
                    return
                await asyncio.sleep(0.02)

    # ---- leadership ---------------------------------------------------------------------

    async def _elected(self, epoch: int) -> None:
        self._roles.put_nowait(("lead", epoch))

    async def _deposed(self, reason: str) -> None:
        self._roles.put_nowait(("follow", reason))

    async def _follow_roles(self) -> None:
        """Take the terms the elector hands out, one at a time, in order."""
        while True:
            role, arg = await self._roles.get()
            try:
                if role == "follow":
                    await self._follow(arg)
                else:
                    await self._take_over(arg)
            except Exception:  # a bug: said, and the next role is taken all the same
                log.exception("could not change role to %s (%s)", role, arg)

    async def _take_over(self, epoch: int) -> None:
        try:
            await self._lead(epoch)
        except Exception as e:
            level = logging.WARNING if isinstance(e, LakeshoreError) else logging.ERROR
            log.log(level, "could not take over as leader (epoch %d): %s", epoch, e,
                    exc_info=not isinstance(e, LakeshoreError))  # fmt: skip
            await self._follow(f"the takeover failed: {e}")
            with contextlib.suppress(Exception):
                await self.replica.lease.resign()

    async def _lead(self, epoch: int) -> None:
        """Record the epoch, catch the file up past it, then start serving as leader."""
        replica = self.replica
        began = time.monotonic()
        fence = await _begin(replica, epoch)
        recorded = time.monotonic()
        # Stops following the stream: from here the file is written by this plane's own
        # commits only.
        await replica.projector.catch_up(fence, timeout_s=CATCH_UP_TIMEOUT_S)
        replica.store.write_through(LeaderWrites(replica.state, replica.projector))
        term = StopStack(self._step_s)
        try:
            await seed(replica.store, replica.state)
            parts = await self._build_term(term, epoch)
        except BaseException:
            await term.aclose()
            raise
        self._term, self._parts = term, parts
        self._app = make_app(
            parts.services,
            parts.metrics,
            leading=leading_middleware(
                lambda: self._parts is parts, self._leader_url.get, self._applied, self._own_url
            ),
        )
        if self._doors is not None:
            await self._doors.refresh()
        log.info(
            "leading with epoch %d (state stream at %d) after %.2fs (%.2fs of them for the "
            "epoch record: the state stream's leader)",
            epoch, fence, time.monotonic() - began, recorded - began,
        )  # fmt: skip

    async def _follow(self, reason: str, *, still_leading: bool = False) -> None:
        """Stop everything the term ran; answer as a standby.

        Args:
            still_leading: the lease is still held (the plane stops): the term's last
                writes are still taken while it ends.
        """
        replica = self.replica
        if not still_leading:
            replica.store.write_through(StandbyWrites())
        term, self._term, self._parts = self._term, None, None
        if term is not None:
            # The term's app stays served, answering not_leader (no connection is cut),
            # until a next term's replaces it.
            log.log(logging.INFO if still_leading else logging.WARNING, "stepping down: %s", reason)
            await term.aclose()
        replica.store.write_through(StandbyWrites())
        if not still_leading:
            # A standby follows the stream again from where its file is.
            await _ensure(replica.projector.start(), "the state projector")

    async def _stop_roles(self, roles: asyncio.Task[None]) -> None:
        roles.cancel()
        # Bounded: a takeover waiting in a nats-py call may drop the cancellation (one that
        # lands with an answer); the term is ended all the same.
        _, pending = await asyncio.wait({roles}, timeout=self._step_s / 3)
        if pending:
            log.warning("stopping: the change of role in progress did not end; going on")
        await self._follow("the control plane stops", still_leading=True)

    async def _build_term(self, stack: contextlib.AsyncExitStack, epoch: int) -> Parts:
        """The actors, services and gateway of one leadership term."""
        settings = self.settings
        replica = self.replica
        store, bus, events, nats = replica.store, replica.bus, replica.events, replica.nats
        faults = Faults(settings.fault_points)
        gate = Access(store, quotas=settings.quotas)
        created = await gate.bootstrap()
        if created is not None:
            self.admin_token = created
        daemons, sessions = await _close_the_bus(nats, bus, gate, store, settings, stack)
        runtime = Runtime(
            ask_timeout_s=settings.ask_timeout_s,
            backoff_s=(settings.restart_backoff_s, 2.0, max(30.0, settings.restart_backoff_s)),
        )
        stack.push_async_callback(runtime.shutdown)
        metrics, recorder = replica.metrics, replica.recorder
        lost_runs = LostRuns(
            bus,
            recorder,
            store,
            lost_after_s=settings.lost_after_s,
            ack_wait_s=settings.ack_wait_s,
        )
        stack.push_async_callback(lost_runs.close)
        workers = await runtime.spawn(
            WorkerRegistry(
                store,
                lost_after_s=settings.lost_after_s,
                launch_timeout_s=settings.launch_timeout_s,
                quotas=settings.quotas,
                on_lost=lost_runs.lost,
            )
        )
        runtime.every(settings.heartbeat_s, workers, Sweep())
        labels = QueueLabels.parse(settings.metrics_per_queue)
        metrics.watch(QueueGauges(store=store, bus=bus, workers=workers, labels=labels))
        on_exit, on_placed = exit_reporter(workers), placement_reporter(workers)
        # What the daemons this plane starts are told; one started by hand takes its own.
        flags = daemon_flags(heartbeat_s=settings.heartbeat_s, log_max_bytes=settings.log_max_bytes)
        providers: dict[ProviderKind, Backend] = {
            ProviderKind.LOCAL: LocalProvider(
                self.data_dir / "daemons",
                on_exit,
                flags=flags,
                orphan_after_s=settings.local_orphan_after_s,
            ),
            ProviderKind.EXTERNAL: ExternalProvider(api_url=self._own_url),
            ProviderKind.SSH: SshProvider(on_exit, on_placed, flags=flags),
            ProviderKind.SLURM: SlurmProvider(
                self.data_dir / "daemons", on_exit, on_placed, flags=flags
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
                demand=Demand(store),
            )
        )
        runtime.every(settings.tick_s, controller, Tick())
        try:  # a submit is answered once its work is stored: keep room for what follows
            await bus.keep_reserve()
        except Unavailable as e:
            log.warning("no room kept in JetStream's store for this plane's writes: %s", e)
        # Unwound after the gateway and the queues stop: their last submits' events go out.
        outbox = Outbox(
            bus,
            linger_s=LINGER_S,
            unrecorded=lambda ns, ids: recorder.ask(Unrecorded(ns, ids, memory_only=True)),
        )
        stack.push_async_callback(outbox.close)
        directory = await runtime.spawn(
            QueueDirectory(
                runtime,
                store=store,
                bus=bus,
                workers=workers,
                outbox=outbox,
                key_ttl_s=settings.idempotency_ttl_s,
                faults=faults,
                on_created=sessions.regrant,
                quotas=settings.quotas,
            )
        )

        code = CodeService(
            bus.nc.jetstream(timeout=CODE_API_TIMEOUT_S),
            max_bytes=settings.code_max_bytes,
            max_files=settings.code_max_files,
            replicas=settings.replicas,
            usage=usage_in(store, gate),
            retention_s=settings.code_retention_days * 86400.0,
        )
        stack.push_async_callback(Retention(code, settings.code_prune_every_s).close)
        # What producers stored themselves (``direct_submit``), recorded; listened to below.
        noted = StoredNotes(bus, outbox)
        stack.push_async_callback(noted.close)
        jobs = JobService(
            noted=noted.expects,
            store=store,
            results=events,
            bus=bus,
            directory=directory,
            workers=workers,
            controller=controller,
            recorder=recorder,
            outbox=outbox,
            ask_timeout_s=settings.ask_timeout_s,
            metrics=metrics.invocations,
            quotas=settings.quotas,
            lost_after_s=settings.lost_after_s,
            code=code,
        )
        services = Services(
            access=gate,
            code=code,
            jobs=jobs,
            queues=QueueService(
                store=store,
                bus=bus,
                directory=directory,
                workers=workers,
                settled=jobs.settled,
                code=code,
            ),
            fleet=FleetService(
                store=store,
                bus=bus,
                workers=workers,
                launcher=launcher,
                controller=controller,
                daemons=daemons,
                quotas=settings.quotas,
                direct_submit=settings.direct_submit,
            ),
            problems=lambda: _problems(bus, runtime, replica.runtime),
            history=HistoryService(store=store, directory=directory, settled=jobs.settled),
            backup=BackupService(store=store, events=events, streams=(EVENTS_STREAM, STATE_STREAM)),
            replica=lambda: (epoch, replica.store.state_position),
        )
        services = dataclasses.replace(
            services, logs=LogService(jobs=services.jobs, store=LogTails(bus.nc))
        )
        gateway = Gateway(
            bus,
            access=gate,
            jobs=services.jobs,
            fleet=services.fleet,
            steered=SteeredReplies(count=metrics.gateway.dropped),
        )
        await gateway.start()
        # Unwound in reverse: the controller decides nothing more (it would replace the
        # daemons stopped next), then the daemons started here stop while the gateway still
        # records their last heartbeat (``stopped``), then the gateway, the actors, the bus.
        stack.push_async_callback(gateway.stop)
        if settings.direct_submit:
            notes = await bus.listen(stored_wildcard(), noted.take)
            stack.push_async_callback(notes.unsubscribe)
        for backend in providers.values():
            stack.push_async_callback(backend.close)
        stack.push_async_callback(_halt, controller)
        # Submissions a control plane died inside of, stored without their record.
        announcing = asyncio.create_task(
            announce_in_background(store, bus, events, recorder), name="announce-unrecorded"
        )
        stack.push_async_callback(_cancelled, announcing)
        return Parts(
            bus=bus, events=events, store=store, access=gate, runtime=runtime,
            recorder=recorder, workers=workers, launcher=launcher, controller=controller,
            directory=directory, providers=providers, services=services, sessions=sessions,
            metrics=metrics, epoch=epoch,
        )  # fmt: skip

    async def serve(self) -> str:
        """Serve the HTTP API (the whole API while leading, ``503 not_leader`` otherwise);
        returns its base URL (the real port when 0 was asked)."""
        settings = self.settings
        timeouts = ReadTimeouts(settings.http_header_timeout_s, settings.http_body_timeout_s)
        doors = Doors(settings.host, settings.port, lambda: self._app, timeouts=timeouts)
        self._stack.push_async_callback(doors.close)
        self._doors = doors
        await doors.refresh()
        self.api = f"http://{settings.host}:{doors.port}"
        self.replica.lease.advertise(settings.api_url or advertised_api(settings.host, doors.port))
        log.info("serving the API on %s", self.api)
        if settings.metrics_port is not None:
            self.metrics_url = await self._serve_metrics(self.replica.metrics)
        return self.api

    async def _serve_metrics(self, metrics: PlaneMetrics) -> str:
        """The ``metrics_port`` listener (no token); returns its ``/metrics`` URL."""
        s = self.settings
        timeouts = ReadTimeouts(s.http_header_timeout_s, s.http_body_timeout_s)
        runner = GuardedRunner(
            scrape_app(metrics), timeouts=timeouts, handle_signals=False, access_log=None
        )
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
        """Stop everything started, in reverse order; a second call does nothing.

        Each step is bounded and its failure logged (:class:`~lakeshore.shutdown.StopStack`):
        a stop goes through every step whatever state NATS is in.
        """
        stack, self._stack = self._stack, StopStack(self._step_s)
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

    identities = Identities(daemons, gate, queues_of, direct_submit=settings.direct_submit)
    callout = await bus.respond(
        CALLOUT_SUBJECT,
        Callout(issuer, identities).answer,
        replies_under=CALLOUT_REPLIES,
        steered=lambda subject, reply: log.warning(
            "auth callout request with a reply outside the server's inboxes: dropped"
        ),
        group=CALLOUT_GROUP,
    )
    stack.push_async_callback(callout.unsubscribe)
    system = await connect_nats(nats.url, name="lakeshore-sys", login=nats.login(system=True))
    sessions = Sessions(system, queues_of)
    stack.push_async_callback(sessions.close)
    gate.on_revoke(sessions.revoke_token)
    return daemons, sessions


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _halt(controller: ActorRef[Any]) -> None:
    try:
        await controller.ask(Halt())
    except LakeshoreError as e:
        log.warning("controller not halted: %s", e)


def _problems(bus: NatsBus, *runtimes: Runtime) -> list[str]:
    """What ``/v1/healthz`` reports as wrong now."""
    out = [] if bus.connected else ["NATS is not connected"]
    down = {name: why for runtime in runtimes for name, why in runtime.down().items()}
    return out + [f"actor {name} is down ({why})" for name, why in sorted(down.items())]


async def _begin(replica: Replica, epoch: int) -> int:
    """Record ``epoch`` in the state stream, asking again while the stream has no leader
    (a NATS node was lost with the control plane) for as long as the lease is ours."""
    said = False
    while True:
        try:
            return await replica.state.begin(epoch)
        except LakeshoreError:
            raise
        except Exception as e:  # nats-py's timeouts and 503s while JetStream elects
            if replica.lease.epoch != epoch:
                raise Unavailable(f"the lease was lost while recording epoch {epoch}") from e
            if not said:
                log.info("takeover: the state stream does not answer yet (%s): waiting", e)
                said = True
            await asyncio.sleep(0.1)


async def _ensure(step: Awaitable[Any], what: str) -> Any:
    """Run a start-up step against NATS, naming it when NATS fails."""
    try:
        return await step
    except LakeshoreError:
        raise
    except Exception as e:  # nats-py's errors have no common base with OSError/TimeoutError
        raise Unavailable(f"cannot set up {what}: {type(e).__name__}: {e}") from e
