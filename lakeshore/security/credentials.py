"""A daemon's NATS credential: who it is, signed by the control plane, short-lived.

It is a JWT signed by the issuer nkey (the key that signs the user JWTs), so any control
plane with the issuer can check it without a store; it names the daemon's worker id,
namespace and org and the Lakeshore token it was issued for, whose revocation ends it. A
daemon presents it as its NATS password; the heartbeat answers carry a renewed one, so a
live daemon never holds an expired credential and a dead one's expires.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from lakeshore.errors import Unauthorized
from lakeshore.security import jwt

#: ``aud`` of a daemon credential, so no other JWT the issuer signs passes for one.
AUDIENCE = "lakeshore-daemon"


@dataclass(frozen=True, slots=True)
class DaemonIdentity:
    """What a credential says."""

    worker_id: str
    namespace: str
    org: str
    #: the Lakeshore token it was issued for (``tok-…``)
    token_id: str
    #: Unix time it expires
    expires_at: int


def mint(issuer: jwt.Issuer, identity: DaemonIdentity) -> str:
    """A credential for ``identity`` (its ``expires_at`` included)."""
    return jwt.encode(
        {
            "sub": identity.worker_id,
            "aud": AUDIENCE,
            "exp": identity.expires_at,
            "ls": {"ns": identity.namespace, "org": identity.org, "tok": identity.token_id},
        },
        issuer,
    )


def expiry(ttl_s: float) -> int:
    return int(time.time() + ttl_s)


def verify(issuer: jwt.Issuer, credential: str) -> DaemonIdentity:
    """The identity a credential names, once its signature, issuer and expiry are checked.

    Raises:
        Unauthorized: not a credential of this control plane, or expired.
    """
    claims = jwt.decode(credential, issuer_prefix=jwt.ACCOUNT_PREFIX)
    ls = claims.get("ls")
    if claims.get("iss") != issuer.public_key or claims.get("aud") != AUDIENCE:
        raise Unauthorized("not a daemon credential of this control plane")
    if not isinstance(ls, dict) or not isinstance(claims.get("exp"), int):
        raise Unauthorized("malformed daemon credential")
    try:
        return DaemonIdentity(
            worker_id=str(claims["sub"]),
            namespace=str(ls["ns"]),
            org=str(ls["org"]),
            token_id=str(ls["tok"]),
            expires_at=int(claims["exp"]),
        )
    except KeyError as e:
        raise Unauthorized(f"malformed daemon credential: no {e}") from None


def org_of(credential: str) -> str:
    """The org a credential was issued in, read without checking it (the holder's own:
    which org's code bucket it reads; the server's grant is what enforces it)."""
    try:
        return str(json.loads(jwt.unb64(credential.split(".")[1]))["ls"]["org"])
    except (ValueError, IndexError, KeyError, TypeError):
        return ""


def expires_at(credential: str) -> int:
    """When a credential expires, read without checking it (its holder's estimate; the
    control plane checks)."""
    try:
        return int(json.loads(jwt.unb64(credential.split(".")[1]))["exp"])
    except (ValueError, IndexError, KeyError, TypeError):
        return 0
