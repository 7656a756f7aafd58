"""``lakeshore daemon run``: run a worker daemon in this process until SIGTERM.

Unlike the other commands it talks to NATS, not the HTTP API: a daemon needs only the
NATS URL (and its namespace) to register, pull and report.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys

import click

from lakeshore.cli.options import key_value_pairs
from lakeshore.errors import LakeshoreError
from lakeshore.model import validate_name


def _queue(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    try:
        return [validate_name("queue", q) for q in value]
    except LakeshoreError as e:
        raise click.BadParameter(e.message, ctx, param) from None


@click.command("run")
@click.option(
    "--queue",
    "queues",
    multiple=True,
    callback=_queue,
    metavar="Q",
    help="Pull from Q (repeatable) [default: the default queue].",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    callback=key_value_pairs,
    metavar="K=V",
    help="A label the controller matches queues against (repeatable).",
)
@click.option("--name", default=None, help="Worker name [default: HOSTNAME-PID].")
@click.option("--id", "worker_id", default=None, help="Worker id given by a launcher.")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="Invocations run at the same time.",
)
@click.option(
    "--nats-url",
    envvar="LAKESHORE_NATS_URL",
    default=None,
    help="NATS of the control plane [env: LAKESHORE_NATS_URL].",
)
@click.option("--namespace", "-n", default=None, help="Namespace [default: the client config's].")
@click.option(
    "--heartbeat-s",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option(
    "--drain-timeout-s",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds the running invocations get after SIGTERM.",
)
@click.option("--provider", default="external", show_default=True, help="Who started this daemon.")
@click.option("--managed", is_flag=True, help="Launched and retired by the controller.")
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
    default="INFO",
    show_default=True,
)
def run(
    queues: list[str],
    labels: dict[str, str],
    name: str | None,
    worker_id: str | None,
    concurrency: int,
    nats_url: str | None,
    namespace: str | None,
    heartbeat_s: float,
    drain_timeout_s: float,
    provider: str,
    managed: bool,
    log_level: str,
) -> None:
    """Run a worker daemon: register, pull from its queues, run invocations.

    Without --queue the daemon pulls from the default queue. Membership can change while
    it runs (`lakeshore daemon update`). SIGTERM or Ctrl-C stops claiming and lets the
    running invocations finish within --drain-timeout-s; a second one interrupts them.
    """
    from lakeshore.daemon import DaemonSettings, logs, run_daemon

    logs.configure(log_level)
    if not nats_url:
        raise click.UsageError(
            "no NATS URL: pass --nats-url or set LAKESHORE_NATS_URL (`lakeshore server` "
            "prints the URL of its NATS)"
        )
    try:
        settings = DaemonSettings(
            nats_url=nats_url,
            name=validate_name("worker", name or _default_name()),
            namespace=_namespace(namespace),
            id=worker_id,
            queues=queues,
            labels=labels,
            concurrency=concurrency,
            provider=provider,
            managed=managed,
            heartbeat_s=heartbeat_s,
            drain_timeout_s=drain_timeout_s,
        )
        stop = asyncio.Event()
        code = asyncio.run(run_daemon(settings, stop, environ=os.environ, handle_signals=True))
    except LakeshoreError as e:
        click.echo(f"error: {e.message}", err=True)
        sys.exit(1)
    sys.exit(code)


def _default_name() -> str:
    """``<hostname>-<pid>``, the hostname cut down to what a worker name allows."""
    host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")
    return f"{host[:40] or 'daemon'}-{os.getpid()}"


def _namespace(given: str | None) -> str:
    """The flag, else the client settings' namespace (LAKESHORE_NAMESPACE, config file)."""
    from lakeshore.config import load_client_settings

    return validate_name("namespace", given or load_client_settings({}).namespace)
