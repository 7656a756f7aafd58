"""NATS JWTs signed with nkeys (Ed25519): what the auth callout reads and answers.

The format is nats-io/jwt v2's: ``base64url(header).base64url(claims).base64url(sig)``
with header ``{"typ":"JWT","alg":"ed25519-nkey"}``, the signature made by the issuer's
nkey over the first two parts, ``iss`` the issuer's public nkey. Only the three claim types
Lakeshore handles are built here: the server's ``authorization_request`` (read and
verified), the callout's ``authorization_response`` and the ``user`` it carries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import nkeys
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from lakeshore.errors import Invalid, Unauthorized

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
#: Public nkeys start with their role: N server, A account, U user.
SERVER_PREFIX, ACCOUNT_PREFIX, USER_PREFIX = "N", "A", "U"


def new_account_seed() -> str:
    """A fresh account nkey seed (``SA…``): the issuer of the user JWTs."""
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT).decode()


def new_user_seed() -> str:
    """A fresh user nkey seed (``SU…``): a config user that signs the server's nonce."""
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()


def public_key(seed: str) -> str:
    """The public nkey of a seed.

    Raises:
        Invalid: not an nkey seed.
    """
    try:
        return nkeys.from_seed(seed.strip().encode()).public_key.decode()
    except (nkeys.NkeysError, ValueError, TypeError) as e:
        raise Invalid(f"not an nkey seed: {type(e).__name__}") from None


@dataclass(frozen=True, slots=True)
class Issuer:
    """An account nkey that signs JWTs. Build it with :meth:`from_seed`."""

    public_key: str
    _pair: Any

    @classmethod
    def from_seed(cls, seed: str) -> Issuer:
        """Raises: Invalid: ``seed`` is not an account nkey seed."""
        try:
            pair = nkeys.from_seed(seed.strip().encode())
            public = pair.public_key.decode()
        except (nkeys.NkeysError, ValueError, TypeError) as e:
            raise Invalid(f"not an nkey seed: {type(e).__name__}") from None
        if not public.startswith(ACCOUNT_PREFIX):
            raise Invalid("the issuer must be an account nkey seed (it starts with 'SA')")
        return cls(public, pair)

    def sign(self, data: bytes) -> bytes:
        return self._pair.sign(data)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode(claims: dict[str, Any], issuer: Issuer) -> str:
    """Sign ``claims`` (``sub`` and ``nats`` set by the caller); ``iss``, ``iat`` and
    ``jti`` are filled in here the way nats-io/jwt does."""
    body = {**claims, "iss": issuer.public_key, "iat": int(time.time())}
    body.pop("jti", None)
    digest = hashlib.new("sha512_256", _json(body)).digest()
    body["jti"] = base64.b32encode(digest).rstrip(b"=").decode()
    signed = f"{_b64(_json(_HEADER))}.{_b64(_json(body))}"
    return f"{signed}.{_b64(issuer.sign(signed.encode()))}"


def decode(token: str, *, issuer_prefix: str) -> dict[str, Any]:
    """The claims of ``token`` once its signature by its ``iss`` is checked.

    Args:
        token: the JWT.
        issuer_prefix: the role letter ``iss`` must have (e.g. :data:`SERVER_PREFIX`).

    Raises:
        Unauthorized: malformed, wrongly signed, expired or from the wrong kind of issuer.
    """
    try:
        head, body, sig = token.split(".")
        header = json.loads(unb64(head))
        claims = json.loads(unb64(body))
        signature = unb64(sig)
    except (ValueError, TypeError) as e:
        raise Unauthorized(f"malformed JWT: {e}") from None
    if not isinstance(header, dict) or header.get("alg") not in ("ed25519-nkey", "ed25519"):
        raise Unauthorized("JWT not signed with an nkey")
    issuer = claims.get("iss") if isinstance(claims, dict) else None
    if not isinstance(issuer, str) or not issuer.startswith(issuer_prefix):
        raise Unauthorized(f"JWT issuer is not a {issuer_prefix}… nkey")
    try:
        _public(issuer).verify(signature, f"{head}.{body}".encode())
    except (InvalidSignature, ValueError):
        raise Unauthorized("JWT signature does not verify") from None
    exp = claims.get("exp")
    if isinstance(exp, int) and exp and exp < time.time():
        raise Unauthorized("JWT expired")
    return claims


def _public(nkey: str) -> Ed25519PublicKey:
    """The Ed25519 key of a public nkey (role byte, 32 key bytes, CRC-16 of both).

    Raises:
        ValueError: not a well-formed public nkey.
    """
    raw = base64.b32decode(nkey + "=" * (-len(nkey) % 8))
    if len(raw) != 35 or nkeys.crc16(bytearray(raw[:33])) != int.from_bytes(raw[33:], "little"):
        raise ValueError("not a public nkey")
    return Ed25519PublicKey.from_public_bytes(raw[1:33])


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
