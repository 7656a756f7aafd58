"""The NATS side of the closed bus: the secrets of the control plane and the server config
that makes every other connection go through the control plane's auth callout.

One account, ``LAKESHORE``, holds every stream; ``SYS`` is the system account. Two nkey
users are written into the server's config (their public keys only: the config holds no
secret) and skip the callout: the control plane (every permission in ``LAKESHORE``, and it
answers the callout) and its system user (to list and disconnect clients when access is
revoked).
Every other connection is authenticated by the control plane, which answers with a user
JWT signed by the issuer nkey: its permissions (:mod:`lakeshore.security.grants`) and expiry.

The embedded server's secrets live in the data dir (:func:`load_or_create`); for an
operator's cluster, ``lakeshore nats config`` writes the same file and the ``auth.conf`` to
include in every node's config.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from lakeshore.errors import Invalid
from lakeshore.security.jwt import Issuer, new_account_seed, new_user_seed, public_key

ACCOUNT = "LAKESHORE"
SYSTEM_ACCOUNT = "SYS"


class NatsSecrets(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the control plane needs to run the closed bus (a file of mode 0600)."""

    #: account nkey seed that signs the user JWTs (the server knows its public key)
    issuer_seed: str
    #: user nkey seed of the control plane's connection
    plane_seed: str
    #: user nkey seed of the control plane's system-account connection
    system_seed: str

    @property
    def issuer(self) -> Issuer:
        return Issuer.from_seed(self.issuer_seed)

    @classmethod
    def generate(cls) -> NatsSecrets:
        return cls(
            issuer_seed=new_account_seed(),
            plane_seed=new_user_seed(),
            system_seed=new_user_seed(),
        )


def load(path: Path) -> NatsSecrets:
    """Read a secrets file.

    Raises:
        Invalid: missing, unreadable or malformed, naming the file and how to make one.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise Invalid(
            f"cannot read the NATS secrets file {path}: {e.strerror or e}; "
            "`lakeshore nats config --out DIR` writes one"
        ) from None
    try:
        found = msgspec.json.decode(data, type=NatsSecrets)
        found.issuer  # noqa: B018 — checks the seeds
        public_key(found.plane_seed), public_key(found.system_seed)
    except (msgspec.DecodeError, msgspec.ValidationError, Invalid) as e:
        raise Invalid(f"{path} is not a Lakeshore NATS secrets file: {e}") from None
    return found


def load_or_create(path: Path) -> NatsSecrets:
    """The secrets in ``path``, generated (mode 0600) on first use."""
    if path.exists():
        return load(path)
    made = NatsSecrets.generate()
    write_private(path, msgspec.json.format(msgspec.json.encode(made)) + b"\n")
    return made


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def auth_config(found: NatsSecrets) -> str:
    """The accounts and the auth callout, to put in (or include from) a server's config;
    public keys only."""
    plane, system = public_key(found.plane_seed), public_key(found.system_seed)
    return f"""# Lakeshore: every connection but the control plane's goes through its auth callout.
accounts {{
  {ACCOUNT}: {{
    jetstream: enabled
    users: [ {{ nkey: {plane} }} ]
  }}
  {SYSTEM_ACCOUNT}: {{
    users: [ {{ nkey: {system} }} ]
  }}
}}
system_account: {SYSTEM_ACCOUNT}
authorization {{
  auth_callout {{
    issuer: {found.issuer.public_key}
    account: {ACCOUNT}
    auth_users: [ {plane}, {system} ]
  }}
}}
"""


def tls_config(cert: Path, key: Path) -> str:
    """A ``tls`` block: clients must speak TLS (a plain-text client is refused)."""
    return f"tls {{\n  cert_file: {_quoted(str(cert))}\n  key_file: {_quoted(str(key))}\n}}\n"


def _quoted(value: str) -> str:
    if any(c in value for c in '"\\\n'):
        raise Invalid(f"cannot write {value!r} into a NATS config")
    return f'"{value}"'


def write_server_config(path: Path, found: NatsSecrets, tls: tuple[Path, Path] | None) -> Path:
    """Write a nats-server config with :func:`auth_config` and, given ``(cert, key)``,
    :func:`tls_config`; mode 0600 (it holds the passwords)."""
    text = auth_config(found) + ("" if tls is None else tls_config(*tls))
    write_private(path, text.encode())
    return path
