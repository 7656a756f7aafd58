"""Connecting to NATS: reconnect for ever, log transitions, refuse servers older than 2.12.

Every connection authenticates (the bus is closed, see docs/security.md): the control plane
as its configured user, others through the auth callout with a user name and a password
that may be a callable (read again at each reconnect, so a renewed credential is used).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client as NatsClient

from lakeshore.embedded import check_version
from lakeshore.errors import Unavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NatsLogin:
    """How a connection authenticates: an nkey seed (the control plane's own users), or a
    user and a password (or a callable returning the current one); the TLS context that
    verifies the server (``None``: plain text) and the inbox prefix its permissions allow."""

    user: str | None = None
    password: str | Callable[[], str] | None = None
    nkey_seed: str | None = None
    tls: ssl.SSLContext | None = None
    inbox_prefix: str = "_INBOX"

    def options(self) -> dict[str, object]:
        """The nats-py ``connect`` options that log in this way."""
        found: dict[str, object] = {"tls": self.tls, "inbox_prefix": self.inbox_prefix}
        if self.nkey_seed is not None:
            found["nkeys_seed_str"] = self.nkey_seed
        else:
            found.update(user=self.user, password=self.password)
        return found


class _Client(NatsClient):
    """nats-py 2.16's client (pinned), except that a server's refusal of its credentials
    makes it reconnect (and be asked again) rather than close for good, and that a failed
    attempt's socket is closed.

    When a server cuts a reconnecting client off during its handshake — e.g. the auth
    callout was not answered in time because the control plane itself is reconnecting
    after a node's loss — nats-py 2.16 takes the attempt for a success, then reads the
    server's ``-ERR 'Authorization Violation'`` and closes the client, so a daemon would
    never reconnect. Here it reconnects with its current credentials; a revoked client is
    refused again at each attempt, so it stays cut off.
    """

    _REFUSALS = ("authorization violation", "authentication timeout")

    async def _connect_to_server(self, server: Any) -> None:
        # nats-py 2.16 drops the socket of a failed attempt without closing it (neither its
        # TLS stream nor the plain one under it): a client refused again and again (a
        # revoked daemon) would leak one per attempt.
        old = self._transport
        for writer in (getattr(old, "_io_writer", None), getattr(old, "_bare_io_writer", None)):
            if writer is not None:
                writer.close()
        await super()._connect_to_server(server)

    async def _process_err(self, err_msg: str) -> None:
        if any(refusal in err_msg.lower() for refusal in self._REFUSALS):
            error = nats.errors.Error(f"nats: {err_msg.strip()}; reconnecting")
            await self._error_cb(error)
            task = self._reconnection_task
            if task is not None and not task.done():
                # The reconnect that was taken for a success is still finishing: end it
                # first, so the next one is the only one (nats-py shares their future).
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._process_op_err(error)
            return
        await super()._process_err(err_msg)


def new_client() -> NatsClient:
    """A nats-py client with the two repairs of :class:`_Client` (connect it yourself)."""
    return _Client()


async def connect_nats(
    url: str,
    *,
    name: str,
    login: NatsLogin,
    on_error: Callable[[Exception], None] | None = None,
) -> NatsClient:
    """Connect to ``url``; the client then reconnects on its own after any loss.

    ``url`` may list several servers of a cluster, comma-separated. ``on_error`` hears the
    asynchronous errors the server sends (e.g. a permissions violation).

    Raises:
        Unavailable: NATS cannot be reached.
        NatsTooOld: the server is older than 2.12 (it would silently ignore settings
            this design needs).
    """
    nc: NatsClient | None = None

    async def error_cb(e: Exception) -> None:
        log.warning("nats %s: %s", url, e)
        if on_error is not None:
            on_error(e)

    async def on_disconnect() -> None:
        if nc is not None and not nc.is_closed:
            log.warning("nats: disconnected from %s", url)

    async def on_reconnect() -> None:
        log.info("nats: reconnected to %s", url)

    try:
        nc = _Client()
        await nc.connect(
            [u.strip() for u in url.split(",") if u.strip()],
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            allow_reconnect=True,
            connect_timeout=5,
            error_cb=error_cb,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
            **login.options(),
        )
    except (OSError, nats.errors.Error) as e:
        raise Unavailable(f"cannot connect to NATS at {url}: {e}") from e
    v = nc.connected_server_version
    try:
        check_version((v.major, v.minor, v.patch), where=url)
    except BaseException:
        await nc.close()
        raise
    return nc


def check_cancelled() -> None:
    """Raise the cancellation a nats-py call swallowed.

    nats-py waits with ``asyncio.wait_for``, which on Python 3.11 returns the answer and
    drops a cancellation that lands as the answer arrives: a loop around such calls would
    never stop. Call this after each of them in a loop that is stopped by cancelling it.

    Raises:
        asyncio.CancelledError: the running task was asked to stop.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
