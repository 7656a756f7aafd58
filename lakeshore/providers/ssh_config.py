"""The ``ssh`` provider's config: its keys, their defaults, and the hosts it names.

A provider row's ``config`` is decoded into :class:`SshConfig` (unknown keys refused) and
checked once more for what a type cannot say (a host entry's syntax, a key that would turn
host key checking off). Every refusal is an :class:`~lakeshore.errors.Invalid` (400) that
names the key and how to fix it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from lakeshore.errors import Invalid
from lakeshore.model.resources import GPU_TYPE, MAX_GPUS
from lakeshore.providers.local import CA_ENV, CREDENTIAL_ENV

#: Where a daemon's log and pid files go on its host when ``log_dir`` is not given.
DEFAULT_LOG_DIR = "~/.lakeshore/daemons"
#: The hosts' keys are checked against this file when ``known_hosts`` is not given.
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST = re.compile(
    r"""(?:(?P<user>[^@\s/]+)@)?               # user@
        (?:\[(?P<v6>[0-9A-Fa-f:.]+)\]         # [IPv6]
          |(?P<name>[^@:\s/\[\]]+))            # or a name / IPv4
        (?::(?P<port>\d{1,5}))?                # :port
    """,
    re.VERBOSE,
)


class SshConfig(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``config`` of an ``ssh`` provider row (see ``docs/providers.md``)."""

    #: ``[user@]host[:port]`` entries (IPv6 in brackets), at least one; ties in placement
    #: go to the first listed
    hosts: list[str]
    #: the login on every host whose entry names none; ``None``: asyncssh's default (the
    #: control plane's user, or ``~/.ssh/config``'s)
    user: str | None = None
    #: the SSH port of every host whose entry names none
    port: Annotated[int, Meta(ge=1, le=65535)] = 22
    #: a private key on the control plane's host; ``None``: asyncssh's defaults
    #: (``~/.ssh/id_*``, the agent)
    identity_file: str | None = None
    #: the known_hosts file the hosts' keys are checked against; unset: ``~/.ssh/known_hosts``
    #: (``null`` only with ``insecure_no_host_key_check``)
    known_hosts: str | None | UnsetType = UNSET
    #: accept any host key (a man in the middle gets the daemons' credentials)
    insecure_no_host_key_check: bool = False
    #: the interpreter on the hosts that has lakeshore: ``<python> -m lakeshore daemon run``
    python: str = "python3"
    #: on each host: ``<log_dir>/<namespace>/<name>.log`` and ``<worker-id>.pid``
    log_dir: str = DEFAULT_LOG_DIR
    #: most live daemons of this provider per host; ``None``: no limit
    slots: Annotated[int, Meta(ge=1)] | None = None
    #: extra environment of the daemons (not secret: the provider row is readable)
    env: dict[str, str] = {}
    #: the NATS URL(s) the daemons are given instead of the control plane's
    nats_url: str | None = None
    #: bound of each SSH connection attempt (seconds)
    connect_timeout_s: Annotated[float, Meta(gt=0)] = 10.0
    #: GPUs each daemon is given (``daemon run --gpus N``: the first N its host has); the
    #: controller counts them when it scales GPU work (:mod:`.capacity`)
    gpus: Annotated[int, Meta(ge=1, le=MAX_GPUS)] | None = None
    #: their type, given to each daemon as its ``gpu_type`` label
    gpu_type: Annotated[str, Meta(pattern=GPU_TYPE.pattern)] | None = None


#: The keys a config may have, in the order the docs list them.
CONFIG_KEYS = SshConfig.__struct_fields__


class Target(Struct, frozen=True):
    """One host of a provider, as connected to."""

    #: the entry as written in ``hosts`` (kept in placements: ``{"host": entry}``)
    entry: str
    host: str
    port: int
    user: str | None


def parse_config(config: dict[str, Any]) -> SshConfig:
    """Decode and check a provider row's config.

    Raises:
        Invalid: what is wrong, naming the key (and the keys that exist, for a typo).
    """
    if "hosts" not in config:
        raise Invalid(
            "ssh provider config needs hosts: a list of [user@]host[:port], e.g. "
            '{"hosts": ["gpu1", "gpu2:2222", "lake@gpu3"]}'
        )
    env = config.get("env")
    if isinstance(env, dict):
        config = {**config, "env": _env_strings(env)}
    try:
        # Lax: the CLI's ``--config port=2222`` sends "2222" (and "true", "2.5").
        cfg = msgspec.convert(config, SshConfig, strict=False)
    except msgspec.ValidationError as e:
        raise Invalid(_explain(str(e))) from None
    if not cfg.hosts:
        raise Invalid("ssh provider config: hosts is empty; list at least one [user@]host[:port]")
    seen: set[tuple[str, int]] = set()
    for entry in cfg.hosts:
        target = target_of(cfg, entry)
        if (target.host, target.port) in seen:
            raise Invalid(f"ssh provider config: host {entry!r} is listed twice in hosts")
        seen.add((target.host, target.port))
    if cfg.known_hosts is None and not cfg.insecure_no_host_key_check:
        raise Invalid(
            "ssh provider config: known_hosts: null would turn host key checking off; give "
            "a known_hosts path (default ~/.ssh/known_hosts), or set "
            "insecure_no_host_key_check: true if you accept that risk"
        )
    if isinstance(cfg.known_hosts, str) and cfg.insecure_no_host_key_check:
        raise Invalid(
            "ssh provider config: known_hosts and insecure_no_host_key_check: true contradict "
            "each other; drop one"
        )
    for key, text in (("python", cfg.python), ("log_dir", cfg.log_dir), ("user", cfg.user)):
        if text is not None and (not text.strip() or "\n" in text or "\0" in text):
            raise Invalid(f"ssh provider config: {key} {text!r} must be a non-empty single line")
    for key, text in (("python", cfg.python), ("log_dir", cfg.log_dir)):
        if text.startswith("~") and text != "~" and not text.startswith("~/"):
            raise Invalid(
                f"ssh provider config: {key} {text!r}: only ~ and ~/… (the login's home) are "
                "expanded; write the path out"
            )
    for key in cfg.env:
        if not _ENV_KEY.fullmatch(key):
            raise Invalid(
                f"ssh provider config: env key {key!r} is not an environment variable name "
                "(letters, digits and _, not starting with a digit)"
            )
        if key in (CREDENTIAL_ENV, CA_ENV):
            raise Invalid(
                f"ssh provider config: env key {key!r} is set by the control plane for each "
                "daemon; remove it"
            )
    if cfg.nats_url is not None and not cfg.nats_url.strip():
        raise Invalid("ssh provider config: nats_url is empty; remove it or give a NATS URL")
    return cfg


def target_of(cfg: SshConfig, entry: str) -> Target:
    """Where an entry of ``hosts`` (or a placement's ``host``) points.

    Raises:
        Invalid: the entry is not ``[user@]host[:port]``.
    """
    match = _HOST.fullmatch(entry)
    port = int(match["port"]) if match and match["port"] else cfg.port
    if match is None or not 1 <= port <= 65535:
        raise Invalid(
            f"ssh provider config: host {entry!r} is not [user@]host[:port] (an IPv6 "
            "address in brackets: [::1]:22)"
        )
    return Target(entry, match["v6"] or match["name"], port, match["user"] or cfg.user)


def _env_strings(env: dict[Any, Any]) -> dict[Any, Any]:
    """Numbers as the strings an environment holds (YAML reads ``{N: 0}`` as a number)."""
    out = {}
    for key, value in env.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise Invalid(f"ssh provider config: env {key}: {value!r} is not a string; quote it")
        out[key] = value if isinstance(value, str) else str(value)
    return out


def _explain(error: str) -> str:
    unknown = re.match(r"Object contains unknown field `([^`]*)`", error)
    if unknown:
        return f"ssh provider config has no key {unknown[1]!r}; its keys are: " + ", ".join(
            CONFIG_KEYS
        )
    return f"ssh provider config: {error}"
