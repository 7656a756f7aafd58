"""Namespaces, orgs and bearer tokens: issuing, bootstrapping and authorising.

A token is issued for one namespace and authorises every namespace of that namespace's
org; the admin token (namespace ``None``) authorises everything. Only a token's SHA-256
is stored; the secret is shown once, when it is issued.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass

from lakeshore.errors import Forbidden, NamespaceNotFound, Unauthorized
from lakeshore.model import Namespace, Token, TokenCreated, now, validate_name
from lakeshore.store import Store

log = logging.getLogger(__name__)

DEFAULT_ORG = "default"
DEFAULT_NAMESPACE = "default"
TOKEN_PREFIX = "lsk_"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: the token and the org it belongs to (``None``: admin, every org)."""

    token: Token
    org: str | None

    @property
    def token_id(self) -> str:
        return self.token.id


async def issue_token(
    store: Store, namespace: str | None, description: str = "", *, admin: bool = False
) -> TokenCreated:
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = TokenCreated(
        id="tok-" + secrets.token_hex(6),
        namespace=namespace,
        description=description,
        admin=admin,
        created_at=now(),
        token=secret,
    )
    await store.insert_token(
        Token(
            id=token.id,
            namespace=namespace,
            description=description,
            admin=admin,
            created_at=token.created_at,
        ),
        hash_token(secret),
    )
    return token


async def create_namespace(store: Store, name: str, org: str) -> Namespace:
    ns = Namespace(
        name=validate_name("namespace", name), org=validate_name("org", org), created_at=now()
    )
    await store.insert_namespace(ns)
    log.info("namespace %s created in org %s", name, org)
    return ns


async def bootstrap(store: Store) -> TokenCreated | None:
    """On the first start: org and namespace ``default`` and an admin token.

    Returns:
        The admin token when it was just created, else ``None`` (already bootstrapped).
    """
    if await store.list_tokens(None) or await store.get_namespace(DEFAULT_NAMESPACE):
        return None
    await create_namespace(store, DEFAULT_NAMESPACE, DEFAULT_ORG)
    return await issue_token(store, None, "admin (created by lakeshore server)", admin=True)


async def identify(store: Store, authorization: str | None) -> Caller:
    """Resolve an ``Authorization`` header to a caller.

    Raises:
        Unauthorized: the header is missing, malformed, or names no live token.
    """
    if not authorization:
        raise Unauthorized(
            "missing bearer token: send 'Authorization: Bearer <token>' (the CLI reads "
            "LAKESHORE_TOKEN or the config file that `lakeshore server` writes)"
        )
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
    token = await store.token_by_hash(hash_token(secret.strip()))
    if token is None:
        raise Unauthorized("unknown or revoked token")
    if token.admin or token.namespace is None:
        return Caller(token, None)
    home = await store.get_namespace(token.namespace)
    if home is None:
        raise Unauthorized(f"the token's namespace {token.namespace!r} no longer exists")
    return Caller(token, home.org)


async def authorize(store: Store, caller: Caller, namespace: str) -> Namespace:
    """Check that ``caller`` may act on ``namespace`` (unknown: 404, other org: 403)."""
    ns = await store.get_namespace(namespace)
    if ns is None:
        raise NamespaceNotFound(namespace)
    if caller.org is not None and ns.org != caller.org:
        raise Forbidden(
            f"this token belongs to org {caller.org!r}; namespace {namespace!r} is in org "
            f"{ns.org!r} — use a token issued in that org"
        )
    return ns


def visible_org(caller: Caller, requested: str | None) -> str:
    """The org a namespace creation lands in (a caller may only create in its own)."""
    org = requested or caller.org or DEFAULT_ORG
    if caller.org is not None and org != caller.org:
        raise Forbidden(
            f"this token belongs to org {caller.org!r}; it cannot create namespaces in org {org!r}"
        )
    return org
