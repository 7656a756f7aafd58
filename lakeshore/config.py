"""Settings of the server and of the client, each one frozen Struct loaded once.

This is the only module that reads the environment. The composition root calls
:func:`load_server_settings` or :func:`load_client_settings` once and passes the result down.
Every source is decoded with ``forbid_unknown_fields``, so a misspelt key fails at start-up
with its name and where it came from.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from lakeshore.errors import Invalid
from lakeshore.quotas import Quotas

_S = TypeVar("_S", bound=Struct)
Port = Annotated[int, Meta(ge=0, le=65535)]
Seconds = Annotated[float, Meta(gt=0)]
#: ``metrics_per_queue``: ``all``, ``none`` or ``top:N`` (see :mod:`lakeshore.metrics.labels`).
METRICS_PER_QUEUE = r"^(all|none|top:[1-9][0-9]{0,5})$"


class ServerSettings(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How ``lakeshore server`` runs."""

    data_dir: Path = Path(".lakeshore")
    """Store, embedded NATS data and the written client config; absolute once loaded."""
    host: str = "127.0.0.1"
    """HTTP listen address."""
    port: Port = 8080
    """HTTP port; 0 picks a free one."""
    http_header_timeout_s: Seconds = 10.0
    """A connection that has not sent a request's complete headers this long after it
    opened (on a kept-alive one: after the request's first byte) is closed, in seconds."""
    http_body_timeout_s: Seconds = 30.0
    """A request body that sends nothing for this long is answered 408 and its connection
    closed, in seconds."""
    nats_url: str | None = None
    """An existing NATS server to use; ``None`` runs an embedded one."""
    nats_port: Port = 4222
    """Client port of the embedded NATS server; 0 picks a free one."""
    nats_host: str = "127.0.0.1"
    """Listen address of the embedded NATS server. Beyond loopback it speaks TLS only (a CA
    and server certificate are generated into the data dir unless ``nats_tls_cert_file`` and
    ``nats_tls_key_file`` name the operator's own)."""
    nats_advertise: str | None = None
    """NATS URL(s) daemons on other machines are told to use (``POST …/daemons/join``);
    default: the URL the control plane itself uses."""
    nats_auth_file: Path | None = None
    """With ``nats_url``: the control plane's NATS secrets (written by ``lakeshore nats
    config``); the embedded server keeps its own in the data dir."""
    nats_ca_file: Path | None = None
    """CA bundle that signs the NATS server's certificate (TLS to NATS)."""
    nats_tls_cert_file: Path | None = None
    """The embedded NATS server's own certificate (PEM), instead of a generated one."""
    nats_tls_key_file: Path | None = None
    """The key of ``nats_tls_cert_file`` (PEM)."""
    credential_ttl_s: Annotated[float, Meta(ge=60.0, le=86400.0)] = 3600.0
    """Lifetime of a daemon's NATS credential, renewed on its heartbeats, in seconds."""
    replicas: Annotated[int, Meta(ge=1, le=5)] = 1
    """JetStream replicas of each queue stream (JetStream allows 1 to 5)."""
    ask_timeout_s: Seconds = 10.0
    """How long a request waits for an actor's answer, in seconds."""
    tick_s: Seconds = 1.0
    """Period of the control plane's housekeeping loops, in seconds."""
    lost_after_s: Seconds = 10.0
    """A daemon silent this long is marked lost, in seconds."""
    heartbeat_s: Seconds = 1.0
    """How often daemons report, in seconds."""
    launch_timeout_s: Seconds = 120.0
    """A launched daemon not registered this long after its provider started it is marked
    lost, in seconds (one its provider still holds in a queue, e.g. a pending Slurm job, is
    not timed until it leaves the queue)."""
    max_surge: Annotated[int, Meta(ge=1, le=100)] = 4
    """Most daemons the controller launches per queue (or pool) per tick (at most 100, the
    most one launch may start)."""
    steal_lease_ticks: Annotated[int, Meta(ge=1)] = 3
    """How many ticks a work-stealing lease lasts."""
    ack_wait_s: Seconds = 60.0
    """A claim not renewed for this long returns to its queue (daemons renew every third of
    it while they run), in seconds."""
    idempotency_ttl_s: Annotated[float, Meta(ge=86400.0)] = 7 * 86400.0
    """How long an idempotency key names its invocation, in seconds (at least a day)."""
    restart_backoff_s: Annotated[float, Meta(gt=0, le=60)] = 1.0
    """First back-off of an actor that crashed more than 10 times in a minute (doubling up
    to 30 s), in seconds."""
    fault_points: str = ""
    """Fault tests only: ``point:exit|raise,…`` (see :mod:`lakeshore.faults`)."""
    direct_submit: bool = False
    """Experimental (issue 26's data path, in progress): let the SDK publish a plain submit
    straight into its queue's stream, one JetStream round trip, instead of asking this
    control plane (docs/data-plane.md, "The direct submit"). Off: every submit goes through
    the plane, as before. Not yet held on this path: ``pending_per_org``."""
    quotas: Quotas = Quotas()
    """Per-org quotas: the ``[quotas]`` table (see :class:`lakeshore.quotas.Quotas`)."""
    history_retention_days: Annotated[float, Meta(gt=0)] | None = 30.0
    """How long the events of a finished invocation are kept, in days; older ones are
    folded into per-minute aggregates, then deleted (``None``: kept forever)."""
    history_aggregate_retention_days: Annotated[float, Meta(gt=0)] | None = None
    """How long the per-minute aggregates are kept, in days (``None``: forever)."""
    history_compact_every_s: Seconds = 3600.0
    """How often the history is compacted, in seconds."""
    log_max_bytes: Annotated[int, Meta(ge=0)] = 16 * 1024 * 1024
    """Most bytes of one attempt's output kept in its live log; past it one line says how
    much was dropped. The daemon applies it (``DaemonSettings.log_max_bytes``): the daemons
    this server starts (local, ssh, slurm) are given it (``--log-max-bytes``); one started by
    hand takes its own ``--log-max-bytes`` (the same default)."""
    log_retention_days: Annotated[float, Meta(gt=0)] = 7.0
    """How long runs' live logs are kept (the ``LS_LOGS`` stream's max age), in days."""
    code_max_bytes: Annotated[int, Meta(ge=1)] = 100 * 1024 * 1024
    """Largest code snapshot (its files' bytes together) an upload may be, in bytes; over
    it, a submit with ``code`` is refused naming its size and largest files."""
    code_max_files: Annotated[int, Meta(ge=1)] = 10_000
    """Most files a code snapshot may hold."""
    code_retention_days: Annotated[float, Meta(gt=0)] = 7.0
    """A code snapshot no pending or running job names is deleted this long after its last
    use (its jobs' last event, else its upload), in days."""
    code_prune_every_s: Seconds = 3600.0
    """How often unused code snapshots are looked for, in seconds."""
    metrics_port: Port | None = None
    """A listener of its own serving ``GET /metrics`` without a token (for scrapers);
    ``None``: only the API's token-guarded ``/metrics``; 0 picks a free port."""
    metrics_host: str = "127.0.0.1"
    """Listen address of ``metrics_port``."""
    metrics_per_queue: Annotated[str, Meta(pattern=METRICS_PER_QUEUE)] = "top:100"
    """Which queues get series of their own: ``all``, ``top:N`` (the N with the most
    pending plus running; the rest summed as queue ``_other``) or ``none`` (no queue label)."""
    api_url: str | None = None
    """The URL clients reach this control plane's API at, which standbys name when they send
    clients to the leader; default ``http://<host>:<port>`` (the machine's name for a
    wildcard host)."""
    lease_ttl_s: Annotated[int, Meta(ge=1, le=60)] = 3
    """The leader lease's time to live, in whole seconds: a standby takes over this long
    after the leader stops renewing it (the leader renews every third of it)."""
    local_orphan_after_s: Seconds = 60.0
    """A daemon the ``local`` provider started retires (drains, then exits) once its
    heartbeats have gone unanswered this long, in seconds: it does not outlive a control
    plane that was killed (one started by hand waits for its control plane for ever)."""
    stop_timeout_s: Seconds = 30.0
    """On SIGTERM, the longest the control plane takes to stop, in seconds: each step of
    the stop is bounded, and the process exits at the end of this whatever is left (a
    NATS that does not answer cannot hold it)."""


class ClientSettings(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the CLI and SDK send requests, and as whom."""

    api: str = "http://127.0.0.1:8080"
    """Base URL of the HTTP API, without a trailing slash; or several control planes' URLs
    separated by commas, among which the client follows the leader."""
    token: str | None = None
    """Bearer token; ``None`` sends no credentials."""
    namespace: str = "default"
    """Namespace used when a command names none."""
    output: Literal["table", "json", "yaml"] | None = None
    """CLI output format; ``None`` lets the CLI choose (table in a terminal)."""


class _ClientFile(Struct, frozen=True, forbid_unknown_fields=True):
    """A client config file: :class:`ClientSettings` keys plus ``nats_url``, all optional."""

    #: One URL, several separated by commas, or a list of them.
    api: str | list[str] | UnsetType = UNSET
    token: str | UnsetType = UNSET
    namespace: str | UnsetType = UNSET
    output: Literal["table", "json", "yaml"] | UnsetType = UNSET
    #: Written by the server for daemons; the CLI and SDK do not use it.
    nats_url: str | UnsetType = UNSET


_SERVER_ENV = {
    "LAKESHORE_DATA_DIR": "data_dir",
    "LAKESHORE_HOST": "host",
    "LAKESHORE_PORT": "port",
    "LAKESHORE_NATS_URL": "nats_url",
    "LAKESHORE_NATS_PORT": "nats_port",
    "LAKESHORE_NATS_HOST": "nats_host",
    "LAKESHORE_NATS_AUTH_FILE": "nats_auth_file",
    "LAKESHORE_NATS_CA_FILE": "nats_ca_file",
    "LAKESHORE_REPLICAS": "replicas",
    "LAKESHORE_FAULT_POINTS": "fault_points",
    "LAKESHORE_METRICS_PORT": "metrics_port",
    "LAKESHORE_API_URL": "api_url",
    "LAKESHORE_DIRECT_SUBMIT": "direct_submit",
}
_CLIENT_ENV = {
    "LAKESHORE_API": "api",
    "LAKESHORE_TOKEN": "token",
    "LAKESHORE_NAMESPACE": "namespace",
}
SERVER_FILE = "server.toml"
CLIENT_FILE = "config.toml"


def load_server_settings(
    flags: Mapping[str, Any], *, env: Mapping[str, str] | None = None
) -> ServerSettings:
    """Build the server's settings: ``<data_dir>/server.toml``, then env, then flags.

    ``data_dir`` comes from flags, then ``LAKESHORE_DATA_DIR``, then the default, since it
    locates the file; the file itself may not set it.

    Args:
        flags: CLI values by field name; ``None`` means the flag was not given.
        env: the environment; default ``os.environ``. Empty variables count as unset.

    Raises:
        Invalid: a bad or unknown key or value, naming its source (file path, variable or
            flag), or ``lost_after_s`` not longer than ``heartbeat_s``.
    """
    env = os.environ if env is None else env
    from_env = _from_env(env, _SERVER_ENV)
    from_flags = {k: v for k, v in flags.items() if v is not None}
    _check_source(from_flags, ServerSettings, "command-line flags")
    for var, key in _SERVER_ENV.items():
        if key in from_env:
            _check_source({key: from_env[key]}, ServerSettings, var)
    given = from_flags.get("data_dir") or from_env.get("data_dir") or ".lakeshore"
    data_dir = Path(given).absolute()
    path = data_dir / SERVER_FILE
    from_file = read_toml(path) if path.is_file() else {}
    if "data_dir" in from_file:
        raise Invalid(
            f"{path}: data_dir cannot be set in the file it locates; "
            "use --data-dir or LAKESHORE_DATA_DIR"
        )
    _check_source(from_file, ServerSettings, str(path), strict=True)
    merged = {**from_file, **from_env, **from_flags, "data_dir": data_dir}
    settings = _convert(merged, ServerSettings, "server settings")
    # Checked on the merged result: each source alone may set only one of the two.
    if settings.lost_after_s <= settings.heartbeat_s:
        raise Invalid(
            f"lost_after_s ({settings.lost_after_s:g}) must be longer than heartbeat_s "
            f"({settings.heartbeat_s:g}), or every daemon is lost between two heartbeats"
        )
    return settings


def load_client_settings(
    flags: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ClientSettings:
    """Build the CLI's and SDK's settings; per field, the first source that sets it wins.

    Sources in order: flags, ``LAKESHORE_API`` / ``LAKESHORE_TOKEN`` /
    ``LAKESHORE_NAMESPACE``, the file named by ``LAKESHORE_CONFIG``,
    ``./.lakeshore/config.toml``, then ``lakeshore/config.toml`` in ``$XDG_CONFIG_HOME``
    (default ``~/.config``). Files are optional except the one ``LAKESHORE_CONFIG`` names.

    Args:
        flags: CLI values by field name; ``None`` means the flag was not given.
        env: the environment; default ``os.environ``. Empty variables count as unset.
        cwd: the directory ``./.lakeshore`` is relative to; default the current one.

    Raises:
        Invalid: an unknown flag, a missing ``LAKESHORE_CONFIG`` file, or a file with an
            unknown key (other than ``nats_url``) or a bad value, naming the file.
    """
    env = os.environ if env is None else env
    from_flags = {k: v for k, v in flags.items() if v is not None}
    _check_source(from_flags, ClientSettings, "command-line flags")
    layers: list[dict[str, Any]] = [from_flags, _from_env(env, _CLIENT_ENV)]
    for path in _client_files(env, cwd or Path.cwd()):
        data = _convert(read_toml(path), _ClientFile, str(path), strict=True)
        if isinstance(data.api, list):
            data = msgspec.structs.replace(data, api=",".join(data.api))
        layers.append(msgspec.structs.asdict(data))
    merged: dict[str, Any] = {}
    for layer in reversed(layers):
        merged.update((k, v) for k, v in layer.items() if v is not UNSET)
    merged.pop("nats_url", None)
    settings = _convert(merged, ClientSettings, "client settings")
    # An empty token (a server that had none to write) means no credentials.
    return msgspec.structs.replace(
        settings, api=settings.api.rstrip("/"), token=settings.token or None
    )


def _client_files(env: Mapping[str, str], cwd: Path) -> list[Path]:
    """Existing client config files, highest precedence first."""
    files = []
    if named := env.get("LAKESHORE_CONFIG"):
        path = cwd / named  # an absolute name stays as it is
        if not path.is_file():
            raise Invalid(
                f"LAKESHORE_CONFIG names {path}, which does not exist; fix the path or unset it"
            )
        files.append(path)
    config_home = env.get("XDG_CONFIG_HOME") or Path(env.get("HOME") or Path.home()) / ".config"
    for path in (cwd / ".lakeshore" / CLIENT_FILE, Path(config_home) / "lakeshore" / CLIENT_FILE):
        if path.is_file():
            files.append(path)
    return files


def write_client_config(
    path: Path | str,
    *,
    api: str,
    token: str | None,
    namespace: str,
    nats_url: str | None = None,
) -> None:
    """Write a client config file that :func:`load_client_settings` reads.

    The file holds a token, so it is created with mode 0600 (replacing any earlier file
    atomically) and its parent directories are created as needed. ``None`` values are left
    out.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = {"api": api, "token": token, "namespace": namespace, "nats_url": nats_url}
    text = "".join(f"{k} = {_toml_string(v)}\n" for k, v in values.items() if v is not None)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        # The umask can only remove bits, but an existing tmp file keeps its old mode.
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_toml(path: Path | str) -> dict[str, Any]:
    """Parse a TOML file.

    Raises:
        Invalid: if the file cannot be read or is not valid TOML, naming the file.
    """
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise Invalid(f"cannot read config file {path}: {e.strerror or e}") from e
    except tomllib.TOMLDecodeError as e:
        raise Invalid(f"config file {path} is not valid TOML: {e}") from e


def _toml_string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _from_env(env: Mapping[str, str], names: Mapping[str, str]) -> dict[str, str]:
    return {key: env[var] for var, key in names.items() if env.get(var)}


def _check_source(
    values: Mapping[str, Any], type_: type[Struct], source: str, *, strict: bool = False
) -> None:
    """Decode one source alone, so an error names the source that caused it."""
    _convert(values, type_, source, strict=strict)


def _convert(
    values: Mapping[str, Any], type_: type[_S], source: str, *, strict: bool = False
) -> _S:
    try:
        return msgspec.convert(dict(values), type_, strict=strict, dec_hook=_dec_path)
    except msgspec.ValidationError as e:
        raise Invalid(f"invalid {source}: {e}") from None


def _dec_path(type_: type, value: Any) -> Any:
    if type_ is Path and isinstance(value, str | os.PathLike):
        return Path(value)
    raise NotImplementedError(f"cannot convert {type(value).__name__} to {type_.__name__}")
