"""Namespaces, orgs and tokens."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from lakeshore.model.names import Text


class Namespace(Struct, frozen=True, kw_only=True):
    name: str
    org: str
    created_at: datetime


class QuotaUse(Struct, frozen=True, kw_only=True):
    """One quota: its value, and how much of it is used now."""

    limit: int
    #: null: not counted (``elasticity_max``, the result waits, or NATS did not answer)
    used: int | None = None


class NamespaceQuotas(Struct, frozen=True, kw_only=True):
    """The server's quotas (``[quotas]`` in server.toml) as they apply to a namespace."""

    #: queues of this namespace besides ``default``
    queues_per_namespace: QuotaUse
    #: daemons of the org starting or running (lost and stopped ones do not count)
    daemons_per_org: QuotaUse
    #: daemons the org's ``local`` providers run on the control plane's host
    local_daemons_per_host: QuotaUse
    #: invocations pending in the org's queues
    pending_per_org: QuotaUse
    #: the highest ``elasticity.max`` a queue may have
    elasticity_max: QuotaUse
    #: namespaces of the org
    namespaces_per_org: QuotaUse | None = None
    #: result waits the org may hold open at once (``used``: not counted here)
    result_waits_per_org: QuotaUse | None = None
    #: result waits one token or NATS connection may hold open at once
    result_waits_per_asker: QuotaUse | None = None


class NamespaceDetail(Namespace, frozen=True, kw_only=True):
    """One namespace, with the quotas that apply to it and its org."""

    quotas: NamespaceQuotas | None = None


class Token(Struct, frozen=True, kw_only=True):
    """A token as listed: its hash is never shown."""

    id: str
    #: the namespace it was issued for; null for the admin token
    namespace: str | None
    description: str = ""
    #: admin tokens authorise every namespace of every org
    admin: bool = False
    created_at: datetime


class TokenCreated(Token, frozen=True, kw_only=True):
    """Answer to a token creation: the only time the secret is shown."""

    token: str


class NamespaceCreate(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    #: defaults to the org of the calling token (``default`` for the admin token)
    org: str | None = None


class TokenCreate(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    description: Text = ""
