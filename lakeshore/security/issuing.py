"""Handing daemons their way onto NATS: URL, identity, credential and CA.

Used by ``POST /v1/namespaces/:ns/daemons/join`` (a daemon with a Lakeshore token), by the
``local`` provider (each daemon it starts gets a credential of its own) and by heartbeats,
which renew a credential past half its life.
"""

from __future__ import annotations

from datetime import UTC, datetime

from lakeshore.access import Access
from lakeshore.errors import Unauthorized
from lakeshore.model import DaemonAccess
from lakeshore.security import credentials
from lakeshore.security.credentials import DaemonIdentity
from lakeshore.security.jwt import Issuer

#: The token id of the daemons the control plane starts itself (its providers): they act
#: for the control plane, not for a user's token, so no revocation of a token ends them.
PLANE_TOKEN = "plane"


class DaemonAccessIssuer:
    """Mints and renews daemon credentials.

    Args:
        issuer: the signing key.
        access: to check that the token a credential was issued for is still live.
        ttl_s: a credential's lifetime, in seconds.
        nats_url: the NATS URL(s) daemons are told to use.
        ca_pem: the CA of NATS's TLS certificate, when NATS speaks TLS.
    """

    def __init__(
        self, issuer: Issuer, access: Access, *, ttl_s: float, nats_url: str, ca_pem: str | None
    ) -> None:
        self._issuer, self._access, self._ttl_s = issuer, access, ttl_s
        self.nats_url, self.ca_pem = nats_url, ca_pem

    def issue(self, worker_id: str, namespace: str, org: str, token_id: str) -> DaemonAccess:
        """A fresh credential for this daemon."""
        who = DaemonIdentity(
            worker_id=worker_id,
            namespace=namespace,
            org=org,
            token_id=token_id,
            expires_at=credentials.expiry(self._ttl_s),
        )
        return DaemonAccess(
            worker_id=worker_id,
            namespace=namespace,
            nats_url=self.nats_url,
            credential=credentials.mint(self._issuer, who),
            expires_at=datetime.fromtimestamp(who.expires_at, UTC),
            ca_pem=self.ca_pem,
        )

    async def check(self, credential: str) -> DaemonIdentity:
        """The identity of a valid credential whose token is live.

        Raises:
            Unauthorized: forged, expired, or its token was revoked.
        """
        who = credentials.verify(self._issuer, credential)
        if who.token_id != PLANE_TOKEN and await self._access.live_token(who.token_id) is None:
            raise Unauthorized(f"the token {who.token_id} of daemon {who.worker_id} was revoked")
        return who

    async def renew(self, credential: str, worker_id: str, namespace: str) -> str:
        """A new credential for the daemon that holds ``credential``.

        Raises:
            Unauthorized: ``credential`` is not this daemon's, or no longer valid.
        """
        who = await self.check(credential)
        if (who.worker_id, who.namespace) != (worker_id, namespace):
            raise Unauthorized(f"credential of daemon {who.worker_id} renewed by {worker_id}")
        return self.issue(who.worker_id, who.namespace, who.org, who.token_id).credential
