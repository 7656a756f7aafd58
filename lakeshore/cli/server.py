"""``lakeshore server``: run the control plane (embedded NATS unless --nats-url)."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click

from lakeshore import collector
from lakeshore.errors import LakeshoreError


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the store, the embedded NATS data and config.toml live [default: ./.lakeshore].",
)
@click.option("--host", default=None, help="Address the HTTP API listens on [default: 127.0.0.1].")
@click.option("--port", type=int, default=None, help="HTTP API port [default: 8080; 0: any].")
@click.option(
    "--nats-url",
    default=None,
    help="Use this NATS (a JetStream cluster) instead of starting an embedded one.",
)
@click.option(
    "--nats-port",
    type=int,
    default=None,
    help="Client port of the embedded NATS [default: 4222; 0: any].",
)
@click.option(
    "--nats-host",
    default=None,
    help="Address the embedded NATS listens on; beyond loopback it speaks TLS only, with a "
    "CA generated into the data dir [default: 127.0.0.1].",
)
@click.option(
    "--nats-auth-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --nats-url: the control plane's NATS secrets (`lakeshore nats config`).",
)
@click.option(
    "--nats-ca-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --nats-url: the CA that signs the NATS servers' certificates.",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, 5),
    default=None,
    help="JetStream replicas of each queue stream (3 in production) [default: 1].",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Also serve GET /metrics without a token on this port (for Prometheus) "
    "[default: none; 0: any].",
)
@click.option(
    "--metrics-host",
    default=None,
    help="Address the --metrics-port listener binds [default: 127.0.0.1].",
)
@click.option(
    "--metrics-per-queue",
    default=None,
    metavar="all|top:N|none",
    help="Which queues get series of their own; the rest are summed as queue _other "
    "[default: top:100].",
)
@click.option(
    "--api-url",
    default=None,
    help="The URL clients reach this API at, which the other control planes name when they "
    "send clients to the leader [default: http://HOST:PORT].",
)
@click.option(
    "--lease-ttl",
    "lease_ttl_s",
    type=click.IntRange(1, 60),
    default=None,
    help="With several control planes on one NATS: seconds after the leader stops renewing "
    "its lease before a standby takes over [default: 3].",
)
def server(**flags: object) -> None:
    """Run the control plane: HTTP API, queue actors and (by default) an embedded NATS.

    The first start creates org and namespace `default` and an admin token, and writes
    <data-dir>/config.toml, which the CLI and SDK on this machine read. Stop with Ctrl-C
    (or SIGTERM): it stops within stop_timeout_s (30 s) whatever state NATS is in.

    Several servers given the same --nats-url (a JetStream cluster) are one control plane:
    one leads, the others stand by with their own copy of every row and take over within
    seconds when it is lost (docs/ha.md).
    """
    from lakeshore.config import load_server_settings
    from lakeshore.shutdown import ExitDeadline

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # asyncssh logs every connection and command at INFO; the ssh provider logs its own.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    # Every file the server writes (store, WAL, logs, NATS store) is its user's alone.
    os.umask(0o077)
    deadline = ExitDeadline()
    collector.for_a_server()
    try:
        settings = load_server_settings(flags)
        refuse_a_store_in_use(settings.data_dir)
        asyncio.run(_run(settings, deadline))
    except LakeshoreError as e:
        click.echo(f"error: {e.message}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        deadline.cancel()


def refuse_a_store_in_use(data_dir: Path) -> None:
    """Fail at once if another process holds the data dir's store (DuckDB locks the file),
    before anything starts: a second server would otherwise start a second NATS on the
    first one's NATS store before the store refused it.

    Raises:
        Unavailable: the store is locked by another process.
    """
    from lakeshore.errors import Unavailable

    path = Path(data_dir) / "lakeshore.duckdb"
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return  # no store yet (or unreadable: opening it will say why)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise Unavailable(
            f"the store {path} is in use by another process: another `lakeshore server` "
            f"runs on the data dir {data_dir}; stop it first, or use another --data-dir"
        ) from None
    finally:
        os.close(fd)  # and with it the probe's lock


async def _run(settings, deadline) -> None:
    """Run the control plane until SIGINT / SIGTERM, then stop it within
    ``stop_timeout_s``: its steps are bounded, and ``deadline`` (armed as the stop begins)
    ends the process if what is left does not end in time (asyncio's own cleanup too)."""
    from lakeshore.plane import ControlPlane

    plane = ControlPlane(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def stopping() -> None:
        deadline.arm(settings.stop_timeout_s, "the stop")

    # A start waits for NATS as long as it takes to answer (a cluster that is down): a
    # signal ends the wait (the start then stops what it had started).
    if not await _started(plane, stop, stopping):
        return
    try:
        api = await plane.serve()
        collector.settled()
        config = plane.write_client_config()
        click.echo(f"lakeshore control plane: API {api}, NATS {plane.nats_url}")
        if not plane.leading:
            leader = await plane.leader_url() or "(being elected)"
            click.echo(f"standing by: the leader serves the API at {leader}")
        click.echo(f"dashboard: {api}/ (sign in with a token from {config})")
        click.echo(f"client config written to {config}")
        if plane.metrics_url:
            click.echo(f"metrics for Prometheus (no token): {plane.metrics_url}")
        if plane.admin_token is not None:
            click.echo(f"admin token (shown once, also in {config}): {plane.admin_token.token}")
        click.echo("ready; press Ctrl-C to stop", err=True)
        await stop.wait()
        click.echo("stopping …", err=True)
    finally:
        stopping()
        await plane.stop()


async def _started(plane, stop: asyncio.Event, stopping: Callable[[], None]) -> bool:
    """``plane.start()``, unless ``stop`` is set first: then ``stopping()`` is called, the
    start cancelled (it undoes itself) and the answer is ``False``."""
    starting = asyncio.ensure_future(plane.start())
    signalled = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signalled.cancel()
        if not starting.done():
            stopping()
            starting.cancel()
        await asyncio.gather(starting, signalled, return_exceptions=True)
    if starting.cancelled():
        click.echo("stopped before the control plane had started", err=True)
        return False
    starting.result()
    return True
