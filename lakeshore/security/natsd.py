"""The NATS the control plane runs on, closed: the embedded server, or an operator's.

The embedded server (no ``nats_url``) gets its secrets generated into the data dir
(``nats-auth.json``), its config written beside them (``nats.conf``: the accounts and the
auth callout), and — listening beyond loopback — TLS with a CA generated into
``<data-dir>/tls`` unless the operator names their own certificate. With ``nats_url`` the
operator's cluster already runs that config (``lakeshore nats config`` writes it), and the
control plane reads the same secrets from ``nats_auth_file``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from lakeshore.bus.connection import NatsLogin
from lakeshore.config import ServerSettings
from lakeshore.embedded import NatsServer
from lakeshore.errors import Invalid
from lakeshore.security import serverauth, tls
from lakeshore.security.serverauth import NatsSecrets

log = logging.getLogger(__name__)

SECRETS_FILE = "nats-auth.json"
CONFIG_FILE = "nats.conf"
TLS_DIR = "tls"
_WILDCARDS = {"0.0.0.0", "::", ""}


@dataclass(frozen=True, slots=True)
class PlaneNats:
    """Where the control plane's NATS is and how to log in to it."""

    #: the URL(s) the control plane connects to
    url: str
    #: the URL(s) daemons are told to use
    advertise: str
    secrets: NatsSecrets
    #: PEM of the CA of the server's certificate; ``None``: plain text (loopback only)
    ca_pem: str | None

    def login(self, *, system: bool = False) -> NatsLogin:
        """The control plane's own login (``system``: its system-account user's)."""
        seed = self.secrets.system_seed if system else self.secrets.plane_seed
        context = None if self.ca_pem is None else tls.client_ssl_context(self.ca_pem)
        return NatsLogin(nkey_seed=seed, tls=context)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def start_nats(
    settings: ServerSettings, data_dir: Path, stack: contextlib.AsyncExitStack
) -> PlaneNats:
    """Start the embedded server (its stop registered on ``stack``), or read the secrets
    of the operator's.

    Raises:
        Invalid: ``nats_url`` without ``nats_auth_file``, or a bad secrets/TLS file.
        Unavailable: the embedded server did not start.
    """
    if settings.nats_url:
        if settings.nats_auth_file is None:
            raise Invalid(
                "--nats-url needs the NATS secrets of the control plane: set nats_auth_file "
                "(LAKESHORE_NATS_AUTH_FILE); `lakeshore nats config --out DIR` writes the file "
                "and the auth.conf every NATS node includes"
            )
        ca = _read_text(settings.nats_ca_file) if settings.nats_ca_file else None
        url = settings.nats_url
        return PlaneNats(
            url=url,
            advertise=settings.nats_advertise or url,
            secrets=serverauth.load(settings.nats_auth_file),
            ca_pem=ca,
        )
    secrets = serverauth.load_or_create(data_dir / SECRETS_FILE)
    host = settings.nats_host
    cert_key, ca = None, None
    if not is_loopback(host):
        cert_key, ca = _server_tls(settings, data_dir, host)
    config = serverauth.write_server_config(data_dir / CONFIG_FILE, secrets, cert_key)
    server = NatsServer(
        data_dir / "nats",
        config_file=config,
        host=host,
        port=settings.nats_port,
        server_name="lakeshore-embedded",
    )
    await server.start()
    stack.push_async_callback(server.stop)
    advertise = settings.nats_advertise
    if advertise is None:
        reach = socket.getfqdn() if host in _WILDCARDS else host
        advertise = server.url if is_loopback(host) else f"nats://{reach}:{server.port}"
    return PlaneNats(url=server.url, advertise=advertise, secrets=secrets, ca_pem=ca)


def _server_tls(
    settings: ServerSettings, data_dir: Path, host: str
) -> tuple[tuple[Path, Path], str]:
    """``((cert, key), CA PEM)``: the operator's files, or generated ones."""
    cert, key = settings.nats_tls_cert_file, settings.nats_tls_key_file
    if (cert is None) != (key is None):
        raise Invalid("set both nats_tls_cert_file and nats_tls_key_file, or neither")
    if cert is not None and key is not None:
        if settings.nats_ca_file is None:
            raise Invalid(
                "with your own NATS certificate, set nats_ca_file to the CA that signs it"
            )
        return (cert, key), _read_text(settings.nats_ca_file)
    hosts = tls.default_hosts()
    if host not in _WILDCARDS:
        hosts.append(host.strip("[]"))
    files = tls.ensure_server_tls(data_dir / TLS_DIR, hosts)
    log.info("NATS listens on %s with TLS; clients verify it with %s", host, files.ca)
    return (files.cert, files.key), files.ca.read_text()


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise Invalid(f"cannot read {path}: {e.strerror or e}") from None


@dataclass(frozen=True, slots=True)
class ClusterFiles:
    """What ``lakeshore nats config`` writes for an operator's NATS cluster."""

    #: the control plane's secrets (``--nats-auth-file``)
    secrets: Path
    #: accounts and auth callout, for every node's config (``include``)
    auth_conf: Path
    #: the client TLS block for every node's config, with the CA clients verify
    tls_conf: Path | None
    ca: Path | None


def write_cluster_files(out: Path, tls_hosts: list[str], mount: Path | None = None) -> ClusterFiles:
    """The secrets and config snippets a NATS cluster needs to run Lakeshore's closed bus.

    Args:
        out: the directory to write into (created 0700); existing secrets are kept.
        tls_hosts: names and addresses clients reach the nodes by; none: no TLS files.
        mount: where ``out`` is seen by the NATS servers (paths in ``tls.conf``); default
            ``out`` itself.
    """
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    secrets = serverauth.load_or_create(out / SECRETS_FILE)
    auth_conf = out / "auth.conf"
    serverauth.write_private(auth_conf, serverauth.auth_config(secrets).encode())
    if not tls_hosts:
        return ClusterFiles(out / SECRETS_FILE, auth_conf, None, None)
    files = tls.ensure_server_tls(out / TLS_DIR, tls_hosts)
    seen = (mount or out.absolute()) / TLS_DIR
    tls_conf = out / "tls.conf"
    block = serverauth.tls_config(seen / files.cert.name, seen / files.key.name)
    serverauth.write_private(tls_conf, block.encode())
    return ClusterFiles(out / SECRETS_FILE, auth_conf, tls_conf, files.ca)
