"""Namespaces, orgs and tokens."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from lakeshore.model.names import Text


class Namespace(Struct, frozen=True, kw_only=True):
    name: str
    org: str
    created_at: datetime


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
