"""The control plane's NATS auth callout: every connection but its own is authorised here.

nats-server sends an ``authorization_request`` JWT on ``$SYS.REQ.USER.AUTH`` for each
connecting client; this service reads the client's CONNECT ``user`` and ``pass``, decides who
it is (:class:`Identities`) and answers with a user JWT carrying that connection's
permissions (:mod:`lakeshore.security.grants`), name and expiry, or with an error, which the
server turns into an authorization violation. Two kinds of client exist:

* ``user=daemon``, ``pass=<daemon credential>`` (:mod:`lakeshore.security.credentials`);
* ``user=producer/<nonce>``, ``pass=<Lakeshore token>``: the SDK's fast path; ``<nonce>``
  (16–64 of ``A-Za-z0-9_-``) names its inbox, ``_INBOX.p.<tag>.<nonce>`` (``<tag>`` a
  digest of the token: :func:`~lakeshore.security.grants.inbox_tag`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lakeshore.access import Access
from lakeshore.bus import subjects
from lakeshore.errors import LakeshoreError, Unauthorized
from lakeshore.security import grants, jwt
from lakeshore.security.grants import DAEMON_USER, NAME_SEPARATOR, PRODUCER_USER, Permissions
from lakeshore.security.issuing import DaemonAccessIssuer
from lakeshore.security.serverauth import ACCOUNT

log = logging.getLogger(__name__)

#: Where nats-server asks (in the callout's account).
CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
#: Where nats-server's requests want their answers (its own inboxes); nothing else is
#: answered.
CALLOUT_REPLIES = "$SYS._INBOX"
#: Queue group of the responders: one control plane answers each request.
CALLOUT_GROUP = "lakeshore-callout"
_NONCE = re.compile(r"[A-Za-z0-9_-]{16,64}")


@dataclass(frozen=True, slots=True)
class Grant:
    """What one connection is allowed."""

    #: ``<role>/<org>/<namespace>/<token-id>/<id>/<grant>``: the connection's user name in the
    #: server's connz, by which :mod:`~lakeshore.security.sessions` finds it again
    name: str
    permissions: Permissions


def connection_name(
    role: str, org: str, namespace: str, token_id: str, ident: str, grant: str = "*"
) -> str:
    return NAME_SEPARATOR.join((role, org, namespace, token_id, ident, grant))


def safe_user(user: str) -> str:
    """A CONNECT user name as it may be logged: only its role when it is one of ours, never
    the name itself (a client that put its token there would have it logged in clear)."""
    if not user:
        return "a client without user"
    role = user.partition("/")[0]
    if role == DAEMON_USER or (role == PRODUCER_USER and "/" in user):
        return f"a {role}"
    return "an unknown user"


class Identities:
    """Who a connecting client is, from its CONNECT user and password.

    Args:
        daemons: checks daemon credentials.
        access: tokens, namespaces and orgs.
        queues_of: the queue names of a namespace (its streams are a daemon's grant).
        direct_submit: a producer may publish into its org's queues' streams itself.
    """

    def __init__(
        self,
        daemons: DaemonAccessIssuer,
        access: Access,
        queues_of: Callable[[str], Awaitable[list[str]]],
        *,
        direct_submit: bool = False,
    ) -> None:
        self._daemons, self._access, self._queues_of = daemons, access, queues_of
        self._direct_submit = direct_submit

    async def grant(self, user: str, password: str) -> Grant:
        """Raises: Unauthorized: an unknown kind of client or bad credentials."""
        if user == DAEMON_USER:
            return await self._daemon(password)
        role, _, nonce = user.partition("/")
        if role == PRODUCER_USER and _NONCE.fullmatch(nonce):
            return await self._producer(nonce, password)
        raise Unauthorized(
            "NATS needs Lakeshore credentials: a daemon joins with `LAKESHORE_TOKEN=T "
            "lakeshore daemon run --api URL`; the SDK connects as producer/<nonce> with its "
            "token"
        )

    async def _daemon(self, credential: str) -> Grant:
        who = await self._daemons.check(credential)
        ns = await self._access.namespace(who.namespace)
        if ns is None or ns.org != who.org:
            raise Unauthorized(f"namespace {who.namespace!r} of org {who.org!r} is gone")
        queues = await self._queues_of(who.namespace)
        tag = grants.queues_tag(queues)
        return Grant(
            name=connection_name(
                DAEMON_USER, who.org, who.namespace, who.token_id, who.worker_id, tag
            ),
            permissions=grants.daemon(who.namespace, who.worker_id, queues, who.org),
        )

    async def _producer(self, nonce: str, token: str) -> Grant:
        caller = await self._access.identify(f"Bearer {token}")
        if caller.org is None:
            namespaces = None
        else:
            namespaces = [ns.name for ns in await self._access.list_namespaces(caller.org)]
        return Grant(
            name=connection_name(PRODUCER_USER, caller.org or "*", "*", caller.token_id, nonce),
            permissions=grants.producer(
                namespaces,
                subjects.producer_inbox(grants.inbox_tag(token), nonce),
                direct=self._direct_submit,
            ),
        )


class Callout:
    """Answers nats-server's authorization requests with :class:`Identities`' grants."""

    def __init__(self, issuer: jwt.Issuer, identities: Identities) -> None:
        self._issuer, self._identities = issuer, identities

    async def answer(self, subject: str, data: bytes, reply: str = "") -> bytes:
        """The ``authorization_response`` JWT for one request (never raises)."""
        try:
            request = jwt.decode(data.decode(), issuer_prefix=jwt.SERVER_PREFIX)["nats"]
            user_nkey = str(request["user_nkey"])
            server_id = str(request["server_id"]["id"])
        except (LakeshoreError, KeyError, TypeError, UnicodeDecodeError) as e:
            # Without the user's key and the server's id no answer can be addressed.
            log.warning("nats auth callout: unreadable request: %s", e)
            return b""
        opts = request.get("connect_opts") or {}
        client = request.get("client_info") or {}
        answer: dict[str, Any]
        try:
            grant = await self._identities.grant(
                str(opts.get("user", "")), str(opts.get("pass", ""))
            )
        except LakeshoreError as e:
            log.info(
                "nats: refused %s from %s: %s", safe_user(str(opts.get("user") or "")),
                client.get("host", "?"), e.message,
            )  # fmt: skip
            answer = {"error": e.message}
        except Exception:
            log.exception("nats auth callout failed")
            answer = {"error": "the control plane could not authorise this connection"}
        else:
            # No ``exp``: nats-py closes a connection for good (no reconnect) on the
            # server's "User Authentication Expired"; a credential's expiry is checked at
            # each (re)connect instead, and revocation disconnects (sessions.py).
            user = {
                "sub": user_nkey,
                "aud": ACCOUNT,
                "name": grant.name,
                "nats": grant.permissions.claims(),
            }
            answer = {"jwt": jwt.encode(user, self._issuer)}
        response = {
            "sub": user_nkey,
            "aud": server_id,
            "nats": {**answer, "type": "authorization_response", "version": 2},
        }
        return jwt.encode(response, self._issuer).encode()
