"""``lakeshore daemon``: the workers that pull from queues, and their membership.

``launch`` and ``stop`` are HTTP calls like the rest (their ``--wait`` polls the worker
rows); ``run`` is the daemon itself (:mod:`lakeshore.cli.daemon_run`, imported only
when it is invoked, since it pulls in the daemon's NATS stack).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import click

from lakeshore.cli import output, watch
from lakeshore.cli.context import LakeshoreGroup, run, settings
from lakeshore.cli.options import gpus_flag, key_value_pairs, memory_flag
from lakeshore.cli.params import QUEUE_NAME
from lakeshore.cli.progress import Progress
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    DEFAULT_QUEUE,
    MAX_LAUNCH,
    DaemonLaunch,
    DaemonResources,
    Launched,
    Worker,
    WorkerStatus,
)
from lakeshore.sdk import Client

_LAZY = ("run",)
#: Seconds between two reads of the worker rows while ``--wait`` waits.
_POLL_S = 0.25
_UP = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.RETIRING})
_DEAD = frozenset({WorkerStatus.LOST, WorkerStatus.STOPPED})


class _DaemonGroup(LakeshoreGroup):
    """The ``daemon`` group; it adds ``run`` when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY and cmd_name not in self.commands:
            from lakeshore.cli.daemon_run import run as run_daemon

            self.add_command(run_daemon)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_DaemonGroup)
def daemon() -> None:
    """Daemons: the workers that pull invocations from queues.

    Every DAEMON argument accepts the worker's id or its name.
    """


@daemon.command("list")
@watch.option
def list_() -> None:
    """List daemons with their queues and status."""
    watch.run(lambda c: c.workers_ls(), output.workers)


@daemon.command("show")
@click.argument("ref", metavar="DAEMON")
def show(ref: str) -> None:
    """Show one daemon.

    `queues: []` means the daemon pulls from the default queue.
    """
    run(lambda c: c.worker_show(ref), output.worker)


@daemon.command("update")
@click.argument("ref", metavar="DAEMON")
@click.option(
    "--add-queue", "add", multiple=True, metavar="Q", type=QUEUE_NAME, help="Start pulling from Q."
)
@click.option(
    "--remove-queue",
    "remove",
    multiple=True,
    metavar="Q",
    type=QUEUE_NAME,
    help="Stop pulling from Q.",
)
def update(ref: str, add: tuple[str, ...], remove: tuple[str, ...]) -> None:
    """Change a running daemon's queues.

    The daemon picks the change up on its next poll; no relaunch is needed.

    Both options are repeatable. Removing every queue puts the daemon on the default
    queue. A queue may be added before it exists (the daemon pulls from it once it is
    created); that is warned of on stderr.
    """
    if not add and not remove:
        raise click.UsageError("nothing to change: give --add-queue and/or --remove-queue")

    async def go(client: Client, fmt: str) -> None:
        call = client.worker_queues(ref, add=list(add), remove=list(remove))
        raw = await call.body()
        edited = call.decode(raw)
        for warning in edited.warnings:
            click.echo(f"warning: {warning}", err=True)
        output.emit(fmt, raw, lambda: output.worker(edited))

    _with_client(go)


_TIMEOUT = click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="With --wait: give up (exit 1) after this many seconds.",
)


@daemon.command("launch")
@click.option("--provider", default="local", show_default=True, help="Where to start them.")
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="Q",
    type=QUEUE_NAME,
    help="Pull from Q (repeatable).",
)
@click.option("--count", type=click.IntRange(1, MAX_LAUNCH), default=1, show_default=True)
@click.option("--name", required=True, help="NAME for one daemon, NAME-00 … for several.")
@click.option("--label", "labels", multiple=True, callback=key_value_pairs, metavar="K=V")
@click.option(
    "--gpus",
    callback=gpus_flag,
    metavar="N|0,1|none",
    default=None,
    help="The GPUs each daemon may give its runs (daemon run --gpus) [default: detected].",
)
@click.option(
    "--cpus",
    type=click.FloatRange(0, 1024, min_open=True),
    default=None,
    help="CPUs each daemon's runs may hold together [default: detected].",
)
@click.option(
    "--memory",
    callback=memory_flag,
    metavar="SIZE",
    default=None,
    help="Memory each daemon's runs may hold together, e.g. 64G [default: detected].",
)
@click.option("--wait", is_flag=True, help="Return once every daemon has registered.")
@_TIMEOUT
def launch(
    provider: str,
    queues: tuple[str, ...],
    count: int,
    name: str,
    labels: dict[str, str],
    wait: bool,
    timeout_s: float,
    gpus: str | None = None,
    cpus: float | None = None,
    memory: str | None = None,
) -> None:
    """Launch daemons on a provider.

    Without --queue they pull from the default queue. With --wait, progress goes to
    stderr and the command fails (exit 1) if a daemon is lost or the timeout passes.
    """
    given = DaemonResources(gpus=gpus, cpus=cpus, memory=memory)
    body = DaemonLaunch(
        name=name, provider=provider, queues=list(queues), count=count, labels=labels,
        resources=given if given != DaemonResources() else None,
    )  # fmt: skip
    if not wait:
        run(lambda c: c.daemons_launch(body), _launched)
        return

    async def go(client: Client, fmt: str) -> None:
        call = client.daemons_launch(body)
        raw = await call.body()
        launched = call.decode(raw).workers
        if fmt != "table":
            output.emit(fmt, raw, lambda: _launched(call.decode(raw)))
        await wait_registered(client, launched, timeout_s)
        if fmt == "table":
            # A table shows the daemons as they are now (idle), not as they were launched.
            ids = {w.id for w in launched}
            now = [w for w in await client.workers_ls() if w.id in ids]
            click.echo(_launched(Launched(workers=now)))

    _with_client(go)


@daemon.command("stop")
@click.argument("ref", metavar="DAEMON")
@click.option("--wait", is_flag=True, help="Return once the daemon has stopped.")
@click.option(
    "--force",
    is_flag=True,
    help="Have its provider stop the process now (SIGTERM, SIGKILL after a bound; Slurm: "
    "scancel), for a daemon that does not answer.",
)
@_TIMEOUT
def stop(ref: str, wait: bool, force: bool, timeout_s: float) -> None:
    """Retire a daemon: it finishes its current run, then exits.

    A daemon still starting (a queued Slurm job, say) is stopped where it waits.
    """
    if not wait:
        run(lambda c: c.worker_retire(ref, force=force), output.worker)
        return

    async def go(client: Client, fmt: str) -> None:
        call = client.worker_retire(ref, force=force)
        raw = await call.body()
        output.emit(fmt, raw, lambda: output.worker(call.decode(raw)))
        await wait_stopped(client, call.decode(raw), timeout_s)

    _with_client(go)


async def wait_registered(client: Client, workers: list[Worker], timeout_s: float) -> None:
    """Poll until every one of ``workers`` has registered, reporting progress on stderr
    (a bar on a terminal, a ``2/5 registered (prep-00, prep-01)`` line per change otherwise).

    Raises:
        LakeshoreError: one was lost (or stopped) first, or ``timeout_s`` passed.
    """
    names = {w.id: w.name for w in workers}
    rows: dict[str, Worker] = {}
    seen, progress = 0, Progress()
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                rows = {w.id: w for w in await client.workers_ls() if w.id in names}
                for i, name in names.items():
                    if i not in rows:
                        raise LakeshoreError(f"daemon {name}'s row is gone (relaunched?)")
                    if rows[i].status in _DEAD:
                        raise LakeshoreError(await _why_lost(client, rows[i]))
                up = [names[i] for i in names if rows[i].status in _UP]
                seen = len(up)
                progress.count("registered", up, len(names))
                if seen == len(names):
                    return
                await asyncio.sleep(_POLL_S)
    except TimeoutError:
        starting = [names[i] for i in names if i not in rows or rows[i].status not in _UP]
        raise LakeshoreError(
            f"timed out after {timeout_s:g}s: {seen}/{len(names)} registered; still "
            f"starting: {', '.join(starting)} (see `lakeshore daemon show NAME`)"
        ) from None
    finally:
        progress.close()


async def wait_stopped(client: Client, worker: Worker, timeout_s: float) -> None:
    """Poll until ``worker`` is ``stopped``, showing its status on stderr as it changes.

    Raises:
        LakeshoreError: it was lost instead, or ``timeout_s`` passed.
    """
    progress = Progress()
    try:
        async with asyncio.timeout(timeout_s):
            while (row := await client.worker_show(worker.id)).status is not WorkerStatus.STOPPED:
                if row.status is WorkerStatus.LOST:
                    raise LakeshoreError(f"daemon {worker.name} was lost before it stopped")
                progress.show(f"daemon {worker.name}: {row.status}")
                await asyncio.sleep(_POLL_S)
    except TimeoutError:
        raise LakeshoreError(
            f"timed out after {timeout_s:g}s: daemon {worker.name} has not stopped yet"
        ) from None
    finally:
        progress.close()
    click.echo(f"daemon {worker.name} stopped", err=True)


async def _why_lost(client: Client, worker: Worker) -> str:
    """What happened to a daemon that died before registering, from its queue's events."""
    why = f"daemon {worker.name} is {worker.status} before it registered"
    try:
        events = await client.queue_events(
            (worker.queues or [DEFAULT_QUEUE])[0], verbose=True, limit=100
        )
    except LakeshoreError:
        return why  # the queue need not exist: membership may name queues not created yet
    for e in events:
        detail = e.detail or {}
        if e.type == "daemon_lost" and detail.get("worker") == worker.id:
            return f"{why}: {detail.get('reason') or 'no heartbeat in time'}"
    return why


def _launched(answer: Launched) -> str:
    return output.workers(answer.workers)


def _with_client(go: Callable[[Client, str], Awaitable[None]]) -> None:
    """Run ``go(client, output format)`` with a client bound to the invocation's settings."""
    conf = settings()

    async def main() -> None:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            await go(client, conf.output or "table")

    asyncio.run(main())
