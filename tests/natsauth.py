"""The suite's closed bus: one set of NATS secrets per test session.

The session's nats-server and every server a test starts run the closed-bus config with
these secrets; every control plane on them reads the secrets file through
``LAKESHORE_NATS_AUTH_FILE`` (set by :func:`install` for the whole session, so server
processes inherit it too). Tests that look behind the control plane connect as the control
plane's user (:func:`plane_nats`); a daemon a test starts without the API gets a credential
minted as the control plane's providers do (:func:`daemon_env`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets as secrets_module
import tempfile
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from lakeshore.actors.workers import new_worker_id
from lakeshore.bus import subjects
from lakeshore.bus.connection import new_client
from lakeshore.model import DaemonAccess
from lakeshore.providers.local import daemon_env as provider_env
from lakeshore.security import grants, serverauth
from lakeshore.security.issuing import PLANE_TOKEN, DaemonAccessIssuer
from lakeshore.security.natsd import SECRETS_FILE, ClusterFiles, write_cluster_files
from lakeshore.security.serverauth import NatsSecrets
from lakeshore.security.tls import client_ssl_context

SECRETS_ENV = "LAKESHORE_NATS_AUTH_FILE"


def install() -> Path:
    """Write the session's secrets and point every control plane at them."""
    if existing := os.environ.get(SECRETS_ENV):
        return Path(existing)
    path = Path(tempfile.mkdtemp(prefix="lakeshore-nats-auth-")) / "nats-auth.json"
    serverauth.load_or_create(path)
    os.environ[SECRETS_ENV] = str(path)
    return path


def secrets_file() -> Path:
    return Path(os.environ[SECRETS_ENV])


def seed(data_dir: Path) -> None:
    """Give a ``lakeshore server`` with an embedded NATS the session's secrets (it keeps
    the secrets it finds in its data dir), so the suite's helpers can log in to it."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = data_dir / SECRETS_FILE
    if not target.exists():
        serverauth.write_private(target, secrets_file().read_bytes())


def cluster_files(directory: Path) -> ClusterFiles:
    """What ``lakeshore nats config --tls-host 127.0.0.1`` writes for a cluster, with the
    session's secrets (so every helper here logs in to it)."""
    seed(directory)
    return write_cluster_files(directory, ["127.0.0.1"])


def secrets() -> NatsSecrets:
    return serverauth.load(secrets_file())


def server_config(path: Path, tls: tuple[Path, Path] | None = None) -> Path:
    """A nats-server config closed with the session's secrets (and TLS if given)."""
    return serverauth.write_server_config(path, secrets(), tls)


async def plane_nats(
    url: str | list[str], *, ca_pem: str | None = None, **options: Any
) -> NatsClient:
    """Connect to the session's NATS as the control plane's user (every permission), over
    TLS verified with ``ca_pem`` when given."""
    servers = url.split(",") if isinstance(url, str) else url
    found = secrets()
    if ca_pem is not None:
        options["tls"] = client_ssl_context(ca_pem)
    nc = new_client()
    await nc.connect(servers, nkeys_seed_str=found.plane_seed, **options)
    return nc


def asker_inbox(subject: str, body: Any = None) -> str:
    """The inbox the gateway answers a request on ``subject`` under: the daemon's its
    subject names, or the producers' of the token ``body`` carries."""
    _, ns, kind, who = subject.split(".")
    if kind in ("submit", "result"):
        return subjects.producer_inboxes(grants.inbox_tag(body.token))
    return subjects.daemon_inbox(ns, who)


async def ask(
    nc: NatsClient, subject: str, data: bytes, *, inbox: str, timeout: float = 5.0
) -> Msg:
    """A request from a control-plane connection with its reply under ``inbox`` (the
    gateway answers a request nowhere but under the asker's own inbox).

    Raises:
        nats.errors.TimeoutError: no answer within ``timeout``.
    """
    reply = f"{inbox}.{secrets_module.token_hex(8)}"
    sub = await nc.subscribe(reply, max_msgs=1)
    try:
        await nc.publish(subject, data, reply=reply)
        return await sub.next_msg(timeout)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


def daemon_access(
    nats_url: str,
    namespace: str = "default",
    org: str = "default",
    worker_id: str | None = None,
    ca_pem: str | None = None,
) -> DaemonAccess:
    """A daemon's NATS access minted as the control plane's ``local`` provider does (its
    token check is never reached: a provider's daemons act for the control plane)."""
    issuer = DaemonAccessIssuer(
        secrets().issuer,
        None,  # type: ignore[arg-type]
        ttl_s=3600,
        nats_url=nats_url,
        ca_pem=ca_pem,
    )
    return issuer.issue(worker_id or new_worker_id(), namespace, org, PLANE_TOKEN)


def daemon_env(access: DaemonAccess) -> dict[str, str]:
    """The environment ``lakeshore daemon run --id … --nats-url …`` needs with ``access``."""
    return provider_env(access)


async def plain_text_answer(host: str, port: int, timeout_s: float = 15.0) -> tuple[bytes, bytes]:
    """Speak plain-text NATS to ``host:port``: ``(the server's INFO line, what it answered
    a CONNECT and PING with)``. A TLS-only server says ``"tls_required":true`` and never
    answers ``PONG``. (A raw socket: nats-py never sends plain text to a TLS server, and
    its ``close()`` hangs after a failed TLS handshake.)"""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            info = await reader.readline()
            writer.write(b'CONNECT {"verbose":false}\r\nPING\r\n')
            await writer.drain()
            answer = await reader.read()
        finally:
            writer.close()
            await writer.wait_closed()
    return info, answer
