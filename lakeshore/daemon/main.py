"""The worker daemon's composition root: settings → bus → register → loops → drain → exit.

:func:`run_daemon` builds every piece once and passes each down explicitly. The long-lived
loops (dispatcher, heartbeat, event flush) run in one ``asyncio.TaskGroup``. The stop
sequence is fixed: stop claiming, finish (or interrupt) the runs, flush the events, send
the ``stopped`` heartbeat, close the connection.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from lakeshore import __version__
from lakeshore.bus.work import WorkBus
from lakeshore.daemon import inventory
from lakeshore.daemon.claimer import Claimer
from lakeshore.daemon.code_cache import CodeCache
from lakeshore.daemon.code_cache import default_dir as default_code_dir
from lakeshore.daemon.credential import Credential
from lakeshore.daemon.dispatcher import Cancel, Dispatcher, Membership, Retire, StopNow
from lakeshore.daemon.events import EventPublisher
from lakeshore.daemon.heartbeat import Heartbeater, silence_after
from lakeshore.daemon.job import JobContext
from lakeshore.daemon.ledger import Ledger
from lakeshore.daemon.metrics import DaemonMetrics, MeteredRunner, MetricsListener
from lakeshore.daemon.refusal import RefusalWatch, TokenCheck
from lakeshore.daemon.runlog import RunLogs
from lakeshore.daemon.runner import Runner
from lakeshore.daemon.settings import DaemonSettings
from lakeshore.errors import Unavailable
from lakeshore.model import Capacity, DaemonControl, Worker, WorkerRegister, describe_capacity
from lakeshore.security.credentials import org_of

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Pause between registration attempts while no registry answers (seconds).
REGISTER_RETRY_S = (0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True, slots=True)
class Running:
    """A registered, running daemon: what callers (tests, the CLI) may look at."""

    worker: Worker
    dispatcher: Dispatcher
    heartbeater: Heartbeater
    claimer: Claimer
    #: the daemon's ``/metrics`` URL when ``metrics_port`` is set
    metrics_url: str | None = None


async def run_daemon(
    settings: DaemonSettings,
    stop: asyncio.Event,
    *,
    environ: Mapping[str, str],
    handle_signals: bool = False,
    on_ready: Callable[[Running], None] | None = None,
    token_live: TokenCheck | None = None,
) -> int:
    """Run one daemon until ``stop`` is set (or a retire order), then drain and return.

    Args:
        settings: how to run.
        stop: set it to retire the daemon (as SIGTERM does).
        environ: the environment commands inherit (beneath each invocation's ``env``).
        handle_signals: SIGTERM / SIGINT retire the daemon; a second one interrupts the
            running jobs at once. Only for the process's main daemon.
        on_ready: called once registered, before the first claim.
        token_live: asks the API whether the token the daemon joined with is live, once
            NATS refuses the daemon again and again (:mod:`lakeshore.daemon.refusal`);
            ``None``: the daemon has no token of its own (the control plane started it).

    Returns:
        The exit status: 0 after a clean drain (also when stopped before registering).

    Raises:
        Unauthorized: NATS refuses the daemon for good (``token revoked: …``, ``credential
            expired: …``): the runs were interrupted, the daemon stopped at once.
        LakeshoreError: the registry refused the worker (e.g. an invalid name). An
            unreachable NATS or registry is waited for, until ``stop``.
    """
    signals = _Signals(stop) if handle_signals else None
    if signals is not None:
        signals.install()
    try:
        return await _run(settings, stop, environ, signals, on_ready, token_live)
    finally:
        if signals is not None:
            signals.remove()


async def _run(
    settings: DaemonSettings,
    stop: asyncio.Event,
    environ: Mapping[str, str],
    signals: _Signals | None,
    on_ready: Callable[[Running], None] | None,
    token_live: TokenCheck | None,
) -> int:
    credential = Credential(settings.access)
    # With orphan_after_s, a control plane that never lets the daemon join is gone too.
    silent = silence_after(settings.orphan_after_s)
    # Before connecting: a --gpus naming devices the host lacks fails at once.
    capacity = await asyncio.to_thread(
        inventory.detect,
        environ,
        gpus=settings.gpus,
        cpus=settings.cpus,
        memory=settings.memory,
        at_least_cpus=settings.concurrency,
    )
    log.info("resources: %s", describe_capacity(capacity))
    bus = await _connect(settings, credential, stop, silent)
    if bus is None:
        return 0
    watch = RefusalWatch(bus.refusals, credential, token_live)
    watcher = asyncio.create_task(watch.run(), name="refusals")
    try:
        reg = WorkerRegister(
            namespace=settings.namespace,
            name=settings.name,
            id=settings.id,
            queues=settings.queues,
            labels=settings.labels,
            provider=settings.provider,
            managed=settings.managed,
            resources=capacity,
        )
        worker = await _register(bus, reg, stop, watch.decided, silent)
        if worker is None and silent.is_set():
            log.warning("no registry answered for %gs: exiting", settings.orphan_after_s)
        if worker is not None:
            log.info("registered as %s (%s) in %s", worker.name, worker.id, worker.namespace)
            await _serve(
                bus, settings, reg, worker, credential, stop, environ, signals, on_ready, watch
            )
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await bus.close()
    if watch.final is not None:
        raise watch.final
    if worker is not None:
        log.info("daemon %s stopped", settings.name)
    return 0


async def _serve(
    bus: WorkBus,
    settings: DaemonSettings,
    reg: WorkerRegister,
    worker: Worker,
    credential: Credential,
    stop: asyncio.Event,
    environ: Mapping[str, str],
    signals: _Signals | None,
    on_ready: Callable[[Running], None] | None,
    watch: RefusalWatch,
) -> None:
    events = EventPublisher(bus, settings.namespace)
    metrics = DaemonMetrics(version=__version__) if settings.metrics_port is not None else None
    org = org_of(settings.access.credential)
    code = CodeCache(
        settings.code_cache or default_code_dir(),
        lambda digest: bus.read_code(org, digest),
        max_bytes=settings.code_cache_max_bytes,
    )
    pool = {
        "processes": settings.concurrency,
        "max_runs_per_process": settings.max_runs_per_process,
        "code": code,
    }
    if metrics is None:
        runner = Runner(environ, **pool)
    else:
        runner = MeteredRunner(environ, metrics, **pool)
    logs = RunLogs(bus, settings.namespace, max_bytes=settings.log_max_bytes)
    ctx = JobContext(
        bus=bus, events=events, runner=runner, worker_id=worker.id, metrics=metrics, logs=logs
    )
    # The nudge callback reaches the dispatcher built just below (called only later).
    claimer = Claimer(
        bus,
        settings.namespace,
        on_nudge=lambda: dispatcher.wake(),
        worker_id=worker.id,
        runs_here=lambda inv_id: dispatcher.runs(inv_id),
    )
    dispatcher = Dispatcher(
        claimer,
        ctx,
        concurrency=settings.concurrency,
        idle_poll_s=settings.idle_poll_s,
        drain_timeout_s=settings.drain_timeout_s,
        hold_s=settings.hold_s,
        ledger=Ledger(reg.resources or Capacity(), settings.labels),
    )
    heart = Heartbeater(
        bus, worker, reg, dispatcher, settings.heartbeat_s, credential,
        orphan_after_s=settings.orphan_after_s,
    )  # fmt: skip
    dispatcher.tell(Membership(list(worker.queues)))
    control = await bus.subscribe_control(
        settings.namespace, worker.id, lambda order: _on_control(order, dispatcher)
    )
    if signals is not None:
        signals.dispatcher = dispatcher
    listener = MetricsListener(metrics) if metrics is not None else None
    try:
        if listener is not None:
            await listener.start(settings.metrics_host, settings.metrics_port or 0)
        async with asyncio.TaskGroup() as tg:
            flusher = tg.create_task(events.run(), name="events")
            beater = tg.create_task(heart.run(), name="heartbeat")
            watcher = tg.create_task(_retire_on(stop, dispatcher), name="stop")
            refused = tg.create_task(_stop_now_on(watch.decided, dispatcher, bus), name="refused")
            if on_ready is not None:
                url = listener.url if listener is not None else None
                on_ready(Running(worker, dispatcher, heart, claimer, url))
            await dispatcher.run()
            for task in (flusher, beater, watcher, refused):
                task.cancel()
    finally:
        await control.close()
        await claimer.close()
        await runner.close()
        # The runs are over: their last output goes out (none can once NATS refuses us).
        await logs.close(0.0 if watch.final is not None else settings.request_timeout_s)
        if listener is not None:
            await listener.close()
    if watch.final is not None:
        return  # NATS refuses this daemon: nothing more can be published
    await _flush(events, settings.request_timeout_s)
    await heart.final(settings.request_timeout_s)


async def _connect(
    settings: DaemonSettings, credential: Credential, *stops: asyncio.Event
) -> WorkBus | None:
    """Connect, however long NATS takes to come up; ``None`` if one of ``stops`` (a stop,
    or ``orphan_after_s`` passing) is set first.

    The connection retries an unreachable server for ever (a daemon may well start before
    its NATS), so only ``stops`` end the wait.
    """
    bus = await _unless_stopped(
        WorkBus.connect(
            settings.access,
            settings.name,
            password=credential.current,
            request_timeout_s=settings.request_timeout_s,
        ),
        *stops,
    )
    if bus is None:
        log.info("stopped before NATS at %s answered", settings.access.nats_url)
    return bus


async def _register(bus: WorkBus, reg: WorkerRegister, *stops: asyncio.Event) -> Worker | None:
    """Register, waiting for a registry to answer; ``None`` if one of ``stops`` is set
    first (a stop, or NATS refusing the daemon for good).

    A stop abandons the request in flight: its answer may never come (a control plane
    that stopped after it registered the daemon), and a stop must not wait its timeout.
    """
    attempt = 0
    while not any(stop.is_set() for stop in stops):
        try:
            return await _unless_stopped(bus.register(reg), *stops)
        except Unavailable as e:
            pause = REGISTER_RETRY_S[min(attempt, len(REGISTER_RETRY_S) - 1)]
            if attempt == 0:
                log.warning("registration not answered (%s); retrying", e)
            attempt += 1
            await _unless_stopped(asyncio.sleep(pause), *stops)
    return None


async def _unless_stopped(step: Awaitable[T], *stops: asyncio.Event) -> T | None:
    """``await step``, or ``None`` (``step`` cancelled) if one of ``stops`` is set first."""
    doing = asyncio.ensure_future(step)
    stopping = [asyncio.create_task(stop.wait(), name="stop") for stop in stops]
    try:
        await asyncio.wait({doing, *stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (doing, *stopping):
            if not task.done():
                task.cancel()
        await asyncio.gather(doing, *stopping, return_exceptions=True)
    return None if doing.cancelled() else doing.result()


async def _retire_on(stop: asyncio.Event, dispatcher: Dispatcher) -> None:
    await stop.wait()
    dispatcher.tell(Retire("stop requested"))


async def _stop_now_on(refused: asyncio.Event, dispatcher: Dispatcher, bus: WorkBus) -> None:
    """Once NATS refuses the daemon for good: interrupt the runs, and close the connection
    at once, so that it stops reconnecting (a request in flight, a claim, still ends at its
    timeout: the daemon exits within ``request_timeout_s``)."""
    await refused.wait()
    dispatcher.tell(StopNow())
    await bus.close()


def _on_control(order: DaemonControl, dispatcher: Dispatcher) -> None:
    if order.cancel:
        dispatcher.tell(Cancel(order.cancel, by=order.by))
    if order.retire:
        dispatcher.tell(Retire("retire ordered"))


class _Signals:
    """SIGTERM / SIGINT: the first retires the daemon, a second interrupts its runs."""

    _SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self.dispatcher: Dispatcher | None = None

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in self._SIGNALS:
            loop.add_signal_handler(signum, self._on_signal, signum)

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in self._SIGNALS:
            loop.remove_signal_handler(signum)

    def _on_signal(self, signum: signal.Signals) -> None:
        if self.dispatcher is None:
            self._stop.set()  # not registered yet: nothing to drain
        elif self.dispatcher.retiring:
            log.warning("%s again: interrupting the running jobs", signum.name)
            self.dispatcher.tell(StopNow())
        else:
            self.dispatcher.tell(Retire(signum.name))


async def _flush(events: EventPublisher, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not await events.flush():
                await asyncio.sleep(0.1)  # NATS is back soon or the timeout ends it
    except TimeoutError:
        log.error("exiting with %d event(s) not published", events.buffered)
