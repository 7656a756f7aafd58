"""The SDK's NATS connection: the fast path of submits and result waits.

A producer logs in as ``producer/<nonce>`` with its Lakeshore token as the password (the
control plane's auth callout checks it) and may then only ask the control plane's gateway
to submit to, and wait for results in, its org's namespaces; answers come back on its own
inbox (``_INBOX.p.<tag>.<nonce>``, ``<tag>`` a digest of the token: the gateway answers
nowhere else). Each request is one NATS round trip to the gateway, which runs the same
services as the HTTP routes.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import msgspec
import nats.errors
import nats.js.errors as jse
from nats.aio.client import Client as NatsClient

from lakeshore.bus import subjects
from lakeshore.bus.connection import NatsLogin, connect_nats
from lakeshore.bus.denials import Denials
from lakeshore.errors import Unavailable
from lakeshore.model import StoredNote
from lakeshore.security import grants
from lakeshore.security.tls import client_ssl_context

log = logging.getLogger(__name__)

encode = msgspec.json.encode

_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)


class ProducerBus:
    """A producer's connection; build it with :meth:`connect`."""

    def __init__(self, nc: NatsClient, denials: Denials) -> None:
        self._nc, self._denials = nc, denials

    @classmethod
    async def connect(
        cls, nats_url: str, token: str, ca_pem: str | None, *, name: str = "lakeshore-sdk"
    ) -> ProducerBus:
        """Log in to NATS as a producer with ``token``.

        Raises:
            Unavailable: NATS cannot be reached, or refused the token.
        """
        nonce = secrets.token_hex(8)
        login = NatsLogin(
            user=f"{grants.PRODUCER_USER}{grants.NAME_SEPARATOR}{nonce}",
            password=token,
            tls=None if ca_pem is None else client_ssl_context(ca_pem),
            inbox_prefix=subjects.producer_inbox(grants.inbox_tag(token), nonce),
        )
        denials = Denials()
        nc = await connect_nats(nats_url, name=name, login=login, on_error=denials.heard)
        return cls(nc, denials)

    @property
    def max_payload(self) -> int:
        """The largest request the server takes (bytes)."""
        return self._nc.max_payload

    async def submit(self, namespace: str, queue: str, body: bytes, timeout_s: float) -> bytes:
        """Ask the gateway to submit (a ``FastSubmit``); its answer, undecoded."""
        return await self._request(subjects.submit_subject(namespace, queue), body, timeout_s)

    async def result(
        self, namespace: str, invocation_id: str, body: bytes, timeout_s: float
    ) -> bytes:
        """Ask the gateway for a result (a ``FastResult``); its answer, undecoded."""
        subject = subjects.result_wait_subject(namespace, invocation_id)
        return await self._request(subject, body, timeout_s)

    async def publish_work(
        self, subject: str, payload: bytes, msg_id: str, timeout_s: float
    ) -> Any:
        """Store one invocation in its queue's stream (``direct_submit``); JetStream's
        ``PubAck``.

        Raises:
            Denied: NATS refused the subject to this connection (no direct rights).
            nats.js.errors.NoStreamResponseError: no stream takes the subject (the queue is
                unknown, draining or archived).
            nats.js.errors.APIError: JetStream refused it (``err_code`` 10077: full).
            Unavailable: NATS failed otherwise.
        """
        js = self._nc.jetstream(timeout=timeout_s)
        call = js.publish(subject, payload, headers={"Nats-Msg-Id": msg_id})
        try:
            return await self._denials.unless(subject, call)
        except (jse.NoStreamResponseError, jse.APIError):
            raise
        except _NATS_ERRORS as e:
            raise Unavailable(f"no answer on {subject}: {e!r}") from e

    async def note_stored(self, namespace: str, queue: str, note: StoredNote) -> None:
        """Wake the queue's daemons, and tell the control plane which sequences this
        producer stored; neither is waited for (a note lost costs nothing, see
        :mod:`lakeshore.services.stored`; a daemon not woken pulls at its next poll)."""
        try:
            await self._nc.publish(subjects.nudge_subject(namespace, queue), b"")
            await self._nc.publish(subjects.stored_subject(namespace, queue), encode(note))
        except _NATS_ERRORS as e:
            log.debug("no note of stored invocations: %s", e)

    async def close(self) -> None:
        if not self._nc.is_closed:
            try:
                await self._nc.close()
            except _NATS_ERRORS as e:
                log.debug("nats: closing the producer connection: %s", e)

    async def _request(self, subject: str, body: bytes, timeout_s: float) -> bytes:
        """One request.

        Raises:
            Denied: NATS refused the subject to this connection (e.g. a namespace created
                after it was granted).
            Unavailable: no answer within ``timeout_s``, or no gateway listening.
        """
        try:
            call = self._nc.request(subject, body, timeout=timeout_s)
            reply = await self._denials.unless(subject, call)
        except _NATS_ERRORS as e:
            raise Unavailable(f"no answer on {subject}: {e!r}") from e
        return reply.data


__all__ = ["ProducerBus"]
