"""Routes of namespaces and of their tokens."""

from __future__ import annotations

from lakeshore.model import (
    Namespace,
    NamespaceCreate,
    NamespaceDetail,
    Token,
    TokenCreate,
    TokenCreated,
)
from lakeshore.sdk.call import Call
from lakeshore.sdk.transport import Transport, api_path


class NamespaceRoutes(Transport):
    """Namespaces, and the tokens issued for one."""

    def namespaces_add(self, name: str, org: str | None = None) -> Call[Namespace]:
        """Create a namespace in ``org`` (default: the caller's org)."""
        body = NamespaceCreate(name=name, org=org)
        return Call(self, Namespace, "POST", api_path("namespaces"), json=body)

    def namespaces_ls(self) -> Call[list[Namespace]]:
        """The namespaces the token may see."""
        return Call(self, list[Namespace], "GET", api_path("namespaces"), key="namespaces")

    def namespaces_show(self, name: str | None = None) -> Call[NamespaceDetail]:
        """One namespace (default: the client's), with the server's quotas and what it and
        its org use of each."""
        return Call(self, NamespaceDetail, "GET", self._ns(name))

    def tokens_create(
        self, description: str = "", *, namespace: str | None = None
    ) -> Call[TokenCreated]:
        """Issue a token for the namespace; its secret is in the answer and nowhere else."""
        body = TokenCreate(description=description)
        return Call(self, TokenCreated, "POST", self._ns(namespace, "tokens"), json=body)

    def tokens_ls(self, *, namespace: str | None = None) -> Call[list[Token]]:
        """The namespace's tokens (ids and descriptions, never secrets)."""
        return Call(self, list[Token], "GET", self._ns(namespace, "tokens"), key="tokens")

    def tokens_revoke(self, token_id: str, *, namespace: str | None = None) -> Call[Token]:
        """Revoke a token; the answer is the revoked token."""
        return Call(self, Token, "DELETE", self._ns(namespace, "tokens", token_id))


__all__ = ["NamespaceRoutes"]
