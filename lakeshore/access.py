"""Namespaces, orgs and bearer tokens: issuing, bootstrapping and authorising.

A token is issued for one namespace and authorises every namespace of that namespace's
org; the admin token (namespace ``None``) authorises everything. Only a token's SHA-256
is stored; the secret is shown once, when it is issued.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lakeshore import quotas
from lakeshore.errors import AlreadyExists, Forbidden, NamespaceNotFound, Unauthorized
from lakeshore.model import Namespace, Token, TokenCreated, now, validate_name
from lakeshore.quotas import DEFAULT_QUOTAS, Quotas
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

    @property
    def name(self) -> str:
        """Who it is, as a person reads it: ``bob's CI (tok-…)``, or the token's id alone."""
        t = self.token
        return f"{t.description} ({t.id})" if t.description else t.id


class Access:
    """The one owner of namespace and token rows, with an in-memory view of both.

    Every request is authorised here, so the lookups must not cost a store round trip:
    namespaces (never deleted) and live tokens are cached once read, and every write goes
    through this object, which keeps the cache true (a revoked token is forgotten at once).

    Args:
        store: the rows.
        quotas: the server's quotas (``namespaces_per_org`` is checked here, the owner of
            the rows it counts).
    """

    def __init__(self, store: Store, *, quotas: Quotas = DEFAULT_QUOTAS) -> None:
        self._store = store
        self._quotas = quotas
        # Count and insert in one step: two creations at once must not both fit the
        # last place of an org's quota.
        self._creating = asyncio.Lock()
        self._namespaces: dict[str, Namespace] = {}
        self._tokens: dict[str, Token] = {}
        self._on_revoke: list[Callable[[str], Awaitable[object]]] = []

    async def issue_token(
        self, namespace: str | None, description: str = "", *, admin: bool = False
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
        row = Token(
            id=token.id,
            namespace=namespace,
            description=description,
            admin=admin,
            created_at=token.created_at,
        )
        await self._store.insert_token(row, hash_token(secret))
        return token

    async def revoke_token(self, namespace: str, token_id: str) -> Token | None:
        token = await self._store.revoke_token(namespace, token_id)
        self._tokens = {h: t for h, t in self._tokens.items() if t.id != token_id}
        if token is not None:
            for listener in self._on_revoke:
                await listener(token_id)
        return token

    def on_revoke(self, listener: Callable[[str], Awaitable[object]]) -> None:
        """Call ``listener(token_id)`` after each revocation (e.g. to cut its NATS access)."""
        self._on_revoke.append(listener)

    async def live_token(self, token_id: str) -> Token | None:
        """The token with this id, unless it was revoked (or never existed)."""
        for token in self._tokens.values():
            if token.id == token_id:
                return token
        return await self._store.token_by_id(token_id)

    async def create_namespace(self, name: str, org: str) -> Namespace:
        """A new namespace ``name`` in ``org``.

        Raises:
            InvalidName: ``name`` or ``org`` is not a valid name.
            AlreadyExists: a namespace ``name`` exists (in any org).
            QuotaExceeded: ``org`` has ``namespaces_per_org`` namespaces already; nothing
                was created.
        """
        ns = Namespace(
            name=validate_name("namespace", name), org=validate_name("org", org), created_at=now()
        )
        async with self._creating:
            if await self.namespace(ns.name) is None:
                have = len(await self._store.list_namespaces(ns.org))
                quotas.check_namespaces(self._quotas, ns.org, have)
            return await self._insert_namespace(ns)

    async def _insert_namespace(self, ns: Namespace) -> Namespace:
        await self._store.insert_namespace(ns)
        self._namespaces[ns.name] = ns
        log.info("namespace %s created in org %s", ns.name, ns.org)
        return ns

    async def namespace_or_create(self, caller: Caller, name: str) -> Namespace:
        """``name`` once ``caller`` may act on it; an unknown one is created in the caller's
        org first (the provider routes' writes: the user's contract, unlike the queue
        routes' 404). Never call it for a read: a read creates nothing.

        Raises:
            QuotaExceeded: an unknown ``name`` would take the caller's org over
                ``namespaces_per_org``.
            Forbidden: ``name`` is another org's.
        """
        if await self.namespace(validate_name("namespace", name)) is None:
            try:
                await self.create_namespace(name, visible_org(caller, None))
            except AlreadyExists:
                pass  # created by a concurrent request: authorised against that one below
        return await self.authorize(caller, name)

    async def list_namespaces(self, org: str | None) -> list[Namespace]:
        """The namespaces of ``org`` (``None``: every org), by name."""
        return await self._store.list_namespaces(org)

    async def list_tokens(self, namespace: str | None) -> list[Token]:
        """Live tokens of ``namespace`` (``None``: the admin tokens), oldest first."""
        return await self._store.list_tokens(namespace)

    async def namespace(self, name: str) -> Namespace | None:
        ns = self._namespaces.get(name)
        if ns is None and (ns := await self._store.get_namespace(name)) is not None:
            self._namespaces[name] = ns
        return ns

    async def bootstrap(self) -> TokenCreated | None:
        """On the first start: org and namespace ``default`` and an admin token.

        Returns:
            The admin token when it was just created, else ``None`` (already bootstrapped).
        """
        if await self._store.list_tokens(None) or await self.namespace(DEFAULT_NAMESPACE):
            return None
        # Not counted against namespaces_per_org: even a server that forbids namespaces
        # (quota 0) has its default one.
        await self._insert_namespace(
            Namespace(name=DEFAULT_NAMESPACE, org=DEFAULT_ORG, created_at=now())
        )
        return await self.issue_token(None, "admin (created by lakeshore server)", admin=True)

    async def identify(self, authorization: str | None) -> Caller:
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
        digest = hash_token(secret.strip())
        token = self._tokens.get(digest)
        if token is None:
            token = await self._store.token_by_hash(digest)
            if token is None:
                raise Unauthorized("unknown or revoked token")
            self._tokens[digest] = token
        if token.admin or token.namespace is None:
            return Caller(token, None)
        home = await self.namespace(token.namespace)
        if home is None:
            raise Unauthorized(f"the token's namespace {token.namespace!r} no longer exists")
        return Caller(token, home.org)

    async def authorize(self, caller: Caller, namespace: str) -> Namespace:
        """Check that ``caller`` may act on ``namespace`` (unknown: 404, other org: 403)."""
        ns = await self.namespace(namespace)
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
