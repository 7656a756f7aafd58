"""``lakeshore daemon run``: run a worker daemon in this process until SIGTERM.

A daemon asks the API once how to join (``POST …/daemons/join`` with its token: the NATS
URL, its worker id, a short-lived credential and the CA), then talks only to NATS. A daemon
the control plane starts itself (the ``local`` provider) is handed its credential in
``LAKESHORE_NATS_CREDENTIAL`` instead and never calls the API.

The token is best given in ``LAKESHORE_TOKEN`` (or the config file): ``--token`` puts it on
the command line, which every user of the machine can read (``ps``). A daemon that joined
with a token asks the API about it once NATS keeps refusing the daemon, and exits with
:data:`~lakeshore.cli.exits.REFUSED` when it was revoked (:mod:`lakeshore.daemon.refusal`).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import click
import msgspec

from lakeshore.cli import exits
from lakeshore.cli.options import gpus_flag, key_value_pairs, memory_flag
from lakeshore.errors import LakeshoreError, Unauthorized
from lakeshore.model import DaemonAccess, validate_name
from lakeshore.providers.local import CA_ENV, CREDENTIAL_ENV


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
    "--max-runs-per-process",
    type=click.IntRange(1),
    default=None,
    metavar="N",
    help="Replace a function's worker process after N runs [default: no limit].",
)
@click.option(
    "--api",
    default=None,
    metavar="URL",
    help="The control plane's API, asked how to join: one URL, or several separated by commas: "
    "the CLI follows the leader [default: LAKESHORE_API or the config's].",
)
@click.option(
    "--token",
    default=None,
    help="A token of the namespace's org [default: LAKESHORE_TOKEN or the config's]. "
    "Prefer LAKESHORE_TOKEN=T: a command line is visible to every user of the machine (ps).",
)
@click.option(
    "--nats-url",
    envvar="LAKESHORE_NATS_URL",
    default=None,
    help="NATS URL(s) to use instead of the ones the API names [env: LAKESHORE_NATS_URL].",
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
@click.option(
    "--orphan-after-s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Retire (drain, then exit) once no heartbeat was answered this long: the control "
    "plane that started this daemon is gone [default: wait for it for ever].",
)
@click.option("--provider", default="external", show_default=True, help="Who started this daemon.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve this daemon's GET /metrics (no token) on this port [default: none; 0: any].",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the --metrics-port listener binds.",
)
@click.option(
    "--log-max-bytes",
    type=click.IntRange(0),
    default=16 * 1024 * 1024,
    show_default=True,
    help="Most bytes of one run's output kept in its live log; past it one line says how "
    "much was dropped (a daemon the control plane starts is given the server's setting).",
)
@click.option(
    "--code-cache",
    metavar="DIR",
    default=None,
    help="Where this host keeps the code snapshots its runs ship with (daemons naming the "
    "same DIR fetch each once) [default: ~/.cache/lakeshore/code].",
)
@click.option(
    "--code-cache-max-bytes",
    type=click.IntRange(0),
    default=10 * 1024**3,
    show_default=True,
    help="Bound of the code cache; the least recently used snapshots go first.",
)
@click.option(
    "--gpus",
    callback=gpus_flag,
    metavar="N|0,1|none",
    default=None,
    help="The GPUs runs may be given: the first N found, those indices, or none "
    "[default: those nvidia-smi lists, within CUDA_VISIBLE_DEVICES]. On a host without "
    "nvidia-smi, N or 0,1 declares the devices.",
)
@click.option(
    "--cpus",
    type=click.FloatRange(0, 1024, min_open=True),
    default=None,
    help="CPUs the runs may hold together [default: detected (affinity, cgroup quota), "
    "at least --concurrency].",
)
@click.option(
    "--memory",
    callback=memory_flag,
    metavar="SIZE",
    default=None,
    help="Memory the runs may hold together, e.g. 64G [default: the cgroup limit, else "
    "the host's].",
)
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
    max_runs_per_process: int | None,
    api: str | None,
    token: str | None,
    nats_url: str | None,
    namespace: str | None,
    heartbeat_s: float,
    drain_timeout_s: float,
    provider: str,
    managed: bool,
    log_level: str,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    orphan_after_s: float | None = None,
    log_max_bytes: int = 16 * 1024 * 1024,
    code_cache: str | None = None,
    code_cache_max_bytes: int = 10 * 1024**3,
    gpus: str | None = None,
    cpus: float | None = None,
    memory: str | None = None,
) -> None:
    """Run a worker daemon: register, pull from its queues, run invocations.

    Without --queue the daemon pulls from the default queue. Membership can change while
    it runs (`lakeshore daemon update`). SIGTERM or Ctrl-C stops claiming and lets the
    running invocations finish within --drain-timeout-s; a second one interrupts them.
    """
    from lakeshore.daemon import DaemonSettings, logs, run_daemon

    logs.configure(log_level)
    try:
        access, token_live = _access(api, token, nats_url, namespace, worker_id)
        settings = DaemonSettings(
            access=access,
            name=validate_name("worker", name or _default_name()),
            queues=queues,
            labels=labels,
            concurrency=concurrency,
            max_runs_per_process=max_runs_per_process,
            provider=provider,
            managed=managed,
            heartbeat_s=heartbeat_s,
            drain_timeout_s=drain_timeout_s,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            orphan_after_s=orphan_after_s,
            log_max_bytes=log_max_bytes,
            code_cache=Path(code_cache).expanduser().resolve() if code_cache else None,
            code_cache_max_bytes=code_cache_max_bytes,
            gpus=gpus,
            cpus=cpus,
            memory=memory,
        )
        stop = asyncio.Event()
        # Neither the runs (commands: their environment; functions: this process's) nor
        # anything they start may read the daemon's NATS credential.
        for secret in (CREDENTIAL_ENV, CA_ENV):
            os.environ.pop(secret, None)
        environ = dict(os.environ)
        daemon = run_daemon(
            settings, stop, environ=environ, handle_signals=True, token_live=token_live
        )
        try:
            code = asyncio.run(daemon)
        except Unauthorized as e:  # refused for good: `token revoked: …`, says what to do
            click.echo(e.message, err=True)
            sys.exit(exits.REFUSED)
    except LakeshoreError as e:
        click.echo(f"error: {e.message}", err=True)
        sys.exit(1)
    sys.exit(code)


def _default_name() -> str:
    """``<hostname>-<pid>``, the hostname cut down to what a worker name allows."""
    host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")
    return f"{host[:40] or 'daemon'}-{os.getpid()}"


def _access(
    api: str | None,
    token: str | None,
    nats_url: str | None,
    namespace: str | None,
    worker_id: str | None,
) -> tuple[DaemonAccess, Callable[[], Awaitable[bool | None]] | None]:
    """How this daemon joins: handed by the control plane that started it (its credential
    in the environment), or asked of the API with a token; and, with a token, how to ask
    the API whether it is still live."""
    from lakeshore.config import load_client_settings
    from lakeshore.security.credentials import expires_at

    ctx = click.get_current_context()
    given = {"api": api, "token": token, "namespace": namespace}
    conf = load_client_settings({**ctx.meta.get("lakeshore.flags", {}), **given})
    ns = validate_name("namespace", conf.namespace)
    if credential := os.environ.get(CREDENTIAL_ENV):
        if not (nats_url and worker_id):
            raise click.UsageError(f"{CREDENTIAL_ENV} needs --nats-url and --id")
        handed = DaemonAccess(
            worker_id=validate_name("worker id", worker_id),
            namespace=ns,
            nats_url=nats_url,
            credential=credential,
            expires_at=datetime.fromtimestamp(expires_at(credential), UTC),
            ca_pem=os.environ.get(CA_ENV) or None,
        )
        return handed, None
    if conf.token is None:
        raise click.UsageError(
            "a daemon joins with a token: set LAKESHORE_TOKEN (and pass --api URL or set "
            "LAKESHORE_API); `lakeshore tokens create` makes one, `lakeshore server` prints "
            "the admin token"
        )
    access = asyncio.run(_join(conf.api, conf.token, ns, worker_id))
    if nats_url is not None:
        access = msgspec.structs.replace(access, nats_url=nats_url)
    return access, token_check(conf.api, conf.token, ns)


async def _join(api: str, token: str, namespace: str, worker_id: str | None) -> DaemonAccess:
    from lakeshore.sdk import Client

    async with Client(api, token, namespace) as client:
        return await client.daemons_join(worker_id)


#: Bound of the API's answer on whether the token is live (seconds; no answer: not known).
CHECK_TIMEOUT_S = 5.0


def token_check(api: str, token: str, namespace: str) -> Callable[[], Awaitable[bool | None]]:
    """Whether ``token`` is live, as the API answers an authenticated read (``GET
    /v1/bus``): ``False`` on 401, ``None`` without an answer."""

    async def live() -> bool | None:
        from lakeshore.sdk import Client

        try:
            async with Client(
                api,
                token,
                namespace,
                timeout_s=CHECK_TIMEOUT_S,
                failover_s=CHECK_TIMEOUT_S,
                fast_path=False,
            ) as client:
                await client.bus_access()
        except Unauthorized:
            return False
        except LakeshoreError:
            return None
        return True

    return live
