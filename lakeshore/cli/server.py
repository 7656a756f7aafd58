"""``lakeshore server``: run the control plane (embedded NATS unless --nats-url)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click

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
    "--replicas",
    type=click.IntRange(1, 5),
    default=None,
    help="JetStream replicas of each queue stream (3 in production) [default: 1].",
)
def server(**flags: object) -> None:
    """Run the control plane: HTTP API, queue actors and (by default) an embedded NATS.

    The first start creates org and namespace `default` and an admin token, and writes
    <data-dir>/config.toml, which the CLI and SDK on this machine read. Stop with Ctrl-C.
    """
    from lakeshore.config import load_server_settings

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = load_server_settings(flags)
        asyncio.run(_run(settings))
    except LakeshoreError as e:
        click.echo(f"error: {e.message}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        pass


async def _run(settings) -> None:
    from lakeshore.plane import ControlPlane

    plane = ControlPlane(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await plane.start()
    try:
        api = await plane.serve()
        config = plane.write_client_config()
        click.echo(f"lakeshore control plane: API {api}, NATS {plane.nats_url}")
        click.echo(f"client config written to {config}")
        if plane.admin_token is not None:
            click.echo(f"admin token (shown once, also in {config}): {plane.admin_token.token}")
        click.echo("ready; press Ctrl-C to stop", err=True)
        await stop.wait()
        click.echo("stopping …", err=True)
    finally:
        await plane.stop()
