"""Cutting connections off: revocation, and re-granting a namespace's daemons.

A connection's permissions are fixed when it connects, so a change of what it may do
takes effect by disconnecting it: it reconnects at once (every Lakeshore client reconnects
for ever) and the auth callout grants it anew — or refuses it, when its token was revoked.
This module finds connections by the name the callout gave them
(:func:`lakeshore.security.callout.connection_name`; a daemon's names the queue set it
was granted, so a re-grant cuts only the connections that lack a queue) in every server's
connz and kicks them, over the system account (``$SYS.REQ.SERVER.PING.CONNZ``,
``$SYS.REQ.SERVER.<id>.KICK``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress

import nats.errors
from nats.aio.client import Client as NatsClient

from lakeshore.security.grants import DAEMON_USER, NAME_SEPARATOR, queues_tag

log = logging.getLogger(__name__)

_CONNZ = "$SYS.REQ.SERVER.PING.CONNZ"
#: How long to wait for more servers' connz once one answered (a cluster answers from each).
_GATHER_QUIET_S = 0.25
_GATHER_MAX_S = 3.0
#: Grant changes within this window are applied with one round of kicks.
REFRESH_DELAY_S = 0.1


class Sessions:
    """Finds and disconnects client connections by their granted name.

    Args:
        nc: a connection of the system account's user.
        queues_of: the queue names of a namespace now (what its daemons are granted).
    """

    def __init__(self, nc: NatsClient, queues_of: Callable[[str], Awaitable[list[str]]]) -> None:
        self._nc = nc
        self._queues_of = queues_of
        self._stale: set[str] = set()
        self._refresh: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            with suppress(asyncio.CancelledError):
                await self._refresh
        with suppress(nats.errors.Error):
            await self._nc.close()

    async def kick(self, match: Callable[[list[str]], bool]) -> int:
        """Disconnect every client whose name's parts (``role, org, namespace, token id,
        id, grant``; see :func:`lakeshore.security.callout.connection_name`) satisfy ``match``.

        Returns:
            How many connections were disconnected.
        """
        kicked = 0
        for server_id, connections in await self._connz():
            for conn in connections:
                parts = str(conn.get("authorized_user") or "").split(NAME_SEPARATOR)
                if len(parts) == 5:  # named by a Lakeshore before the grant was named too
                    parts.append("")
                if len(parts) == 6 and match(parts):
                    subject = f"$SYS.REQ.SERVER.{server_id}.KICK"
                    body = json.dumps({"cid": conn["cid"]}).encode()
                    with suppress(nats.errors.Error, TimeoutError):
                        await self._nc.request(subject, body, timeout=2.0)
                        kicked += 1
        return kicked

    async def revoke_token(self, token_id: str) -> int:
        """Disconnect every connection that acts for ``token_id``."""
        count = await self.kick(lambda p: p[3] == token_id)
        if count:
            log.info("disconnected %d NATS connection(s) of revoked token %s", count, token_id)
        return count

    def regrant(self, namespace: str) -> None:
        """Have the daemons of ``namespace`` granted again soon (its queues changed);
        changes close together are applied at once."""
        self._stale.add(namespace)
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._regrant(), name="nats-regrant")

    async def _regrant(self) -> None:
        await asyncio.sleep(REFRESH_DELAY_S)
        stale, self._stale = self._stale, set()
        try:
            count = await self.regrant_now(stale)
        except Exception:
            log.exception("could not re-grant the daemons of %s", ", ".join(sorted(stale)))
            return
        if count:
            log.info("re-granting %d daemon connection(s) of %s", count, ", ".join(sorted(stale)))

    async def regrant_now(self, namespaces: set[str]) -> int:
        """Disconnect the daemons of ``namespaces`` that were granted another queue set
        than the one they have now; a daemon that connected after the change keeps its
        connection (and its claims' settling).

        Returns:
            How many connections were disconnected.
        """
        tags = {ns: queues_tag(await self._queues_of(ns)) for ns in namespaces}
        return await self.kick(
            lambda p: p[0] == DAEMON_USER and p[2] in tags and p[5] != tags[p[2]]
        )

    async def _connz(self) -> list[tuple[str, list[dict]]]:
        """``(server id, connections)`` of every server that answers."""
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        found: list[tuple[str, list[dict]]] = []
        try:
            body = json.dumps({"auth": True, "limit": 1 << 20}).encode()
            await self._nc.publish(_CONNZ, body, reply=inbox)
            wait = _GATHER_MAX_S
            loop = asyncio.get_running_loop()
            deadline = loop.time() + _GATHER_MAX_S
            while True:
                try:
                    msg = await sub.next_msg(timeout=max(0.01, min(wait, deadline - loop.time())))
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                answer = json.loads(msg.data)
                server = (answer.get("server") or {}).get("id")
                data = answer.get("data") or {}
                if server:
                    found.append((server, list(data.get("connections") or [])))
                wait = _GATHER_QUIET_S
        finally:
            with suppress(nats.errors.Error):
                await sub.unsubscribe()
        return found
