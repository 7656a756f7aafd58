"""The worker daemon's handle on NATS: claims, acks, events, results and registry requests.

Every NATS failure leaves this module as a :class:`~lakeshore.errors.LakeshoreError`
(:class:`~lakeshore.errors.Unavailable` unless said otherwise), so the daemon never sees a
``nats`` type other than the opaque :data:`Msg` of a claim.

Claims are raw ``no_wait`` pulls (``$JS.API.CONSUMER.MSG.NEXT``) on a dedicated inbox: the
server answers at once with up to ``batch`` messages, followed by a ``404`` status when it
had fewer. ``fetch(n)`` is not used because it lingers to fill the batch, which would hand
work to a daemon that has meanwhile become busy.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js import errors as jse

from lakeshore.bus import codec, subjects
from lakeshore.bus.connection import NatsLogin, connect_nats
from lakeshore.bus.denials import Denials, Denied
from lakeshore.code import bucket
from lakeshore.errors import (
    ERRORS_BY_CODE,
    LakeshoreError,
    QueueNotFound,
    TooLarge,
    Unavailable,
)
from lakeshore.model import (
    PRIORITY_LEVELS,
    DaemonAccess,
    DaemonControl,
    ErrorDetail,
    EventBatch,
    Heartbeat,
    HeartbeatReply,
    HeldAnswer,
    HeldAsk,
    Result,
    Worker,
    WorkerRegister,
)
from lakeshore.security import grants
from lakeshore.security.tls import client_ssl_context

log = logging.getLogger(__name__)

__all__ = ["Msg", "QueueLayout", "Refusals", "Subscriptions", "WorkBus"]

_T = TypeVar("_T")
_NATS_ERRORS = (nats.errors.Error, jse.Error, TimeoutError, OSError)
#: Bound of each request that reads a code snapshot (its meta, one chunk), in seconds.
CODE_READ_S = 10.0


class _Replies:
    """The messages a pull's inbox gets, in order: a subscription with a callback, so that a
    claimed message costs no task of its own (``Subscription.next_msg`` makes one, and a
    uuid, per message)."""

    def __init__(self) -> None:
        self._msgs: deque[Msg] = deque()
        self._arrived = asyncio.Event()

    async def put(self, msg: Msg) -> None:
        self._msgs.append(msg)
        self._arrived.set()

    async def next(self, timeout_s: float) -> Msg:
        """The next message; ``TimeoutError`` when none came within ``timeout_s``."""
        if not self._msgs:
            self._arrived.clear()
            async with asyncio.timeout(timeout_s):
                await self._arrived.wait()
        return self._msgs.popleft()


@dataclass(frozen=True, slots=True)
class QueueLayout:
    """What a daemon needs to know of a queue's stream to claim from it."""

    #: consumer levels to scan, most urgent first (``(0,)`` for a fifo queue)
    levels: tuple[int, ...]
    #: the consumers' ack_wait: a claim not renewed for this long is redelivered (seconds)
    ack_wait_s: float


class _MaybeError(msgspec.Struct, frozen=True):
    """Only the ``error`` member of a reply, to tell an ``ErrorBody`` from an answer."""

    error: ErrorDetail | None = None


class Subscriptions:
    """Core-NATS subscriptions that are closed together."""

    def __init__(self, subs: list[Subscription]) -> None:
        self._subs = subs

    async def close(self) -> None:
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except nats.errors.Error:
                pass  # the connection is already closed: nothing left to unsubscribe
        self._subs = []


class Refusals:
    """The server's refusals of the daemon's credentials, counted in a row.

    A refused reconnect is reported as an ``Authorization Violation``; an answered request
    in between starts the count again. The server says the same when the auth callout is
    not answered in time (the control plane restarting), so a count is a reason to look
    closer, not a verdict (:mod:`lakeshore.daemon.refusal`).
    """

    _REFUSAL = "authorization violation"

    def __init__(self) -> None:
        self.in_row = 0
        self._heard = asyncio.Event()

    def heard(self, error: Exception) -> None:
        if self._REFUSAL in str(error).lower():
            self.in_row += 1
            self._heard.set()

    def reset(self) -> None:
        self.in_row = 0

    async def wait(self, times: int) -> None:
        """Return once the server refused ``times`` times in a row."""
        while self.in_row < times:
            self._heard.clear()
            await self._heard.wait()


class WorkBus:
    """The daemon's NATS connection. Build it with :meth:`connect`; one claim at a time."""

    def __init__(
        self, nc: NatsClient, js: JetStreamContext, *, worker_id: str, request_timeout_s: float
    ) -> None:
        self._nc = nc
        self._js = js
        self._worker_id = worker_id
        self._timeout_s = request_timeout_s
        self._claim_lock = asyncio.Lock()
        self._inbox: tuple[str, _Replies, Subscription] | None = None
        self.denials = Denials()
        self.refusals = Refusals()

    @classmethod
    async def connect(
        cls,
        access: DaemonAccess,
        name: str,
        *,
        password: Callable[[], str],
        request_timeout_s: float = 5.0,
    ) -> WorkBus:
        """Connect to NATS (see :func:`lakeshore.bus.connection.connect_nats`) as the daemon
        ``access`` names.

        Args:
            access: the NATS URL(s), the daemon's id and namespace, the CA.
            name: the connection name shown by the server (the daemon's name).
            password: the daemon's current credential (read again at each reconnect).
            request_timeout_s: bound of every request and JetStream API call (seconds).

        Raises:
            Unavailable: NATS cannot be reached.
        """
        login = NatsLogin(
            user=grants.DAEMON_USER,
            password=password,
            tls=None if access.ca_pem is None else client_ssl_context(access.ca_pem),
            inbox_prefix=subjects.daemon_inbox(access.namespace, access.worker_id),
        )
        denials, refusals = Denials(), Refusals()

        def heard(error: Exception) -> None:
            denials.heard(error)
            refusals.heard(error)

        nc = await connect_nats(access.nats_url, name=name, login=login, on_error=heard)
        js = nc.jetstream(timeout=request_timeout_s)
        bus = cls(nc, js, worker_id=access.worker_id, request_timeout_s=request_timeout_s)
        bus.denials, bus.refusals = denials, refusals
        return bus

    async def close(self) -> None:
        """Flush what is buffered (acks, naks) and close the connection."""
        if not self._nc.is_closed:
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self._nc.drain()
            except _NATS_ERRORS as e:
                log.warning("nats: closing without drain: %s", e)
                try:
                    async with asyncio.timeout(self._timeout_s):
                        await self._nc.close()
                except _NATS_ERRORS as e:
                    # A server that is gone: what was still buffered is lost (unsent acks
                    # mean redeliveries, which the Recorder fences).
                    log.warning("nats: closed without flushing: %r", e)

    # ---- claiming ------------------------------------------------------------------------

    async def queue_layout(self, namespace: str, queue: str) -> QueueLayout | None:
        """Learn a queue's kind from its consumers: ``p9`` exists only on priority queues.

        Returns:
            The layout, or ``None`` when the queue has no stream (or no consumer) yet.

        Raises:
            Unavailable: JetStream did not answer.
        """
        stream = subjects.queue_stream(namespace, queue)
        top = PRIORITY_LEVELS - 1
        try:
            for probe, levels in (
                (top, tuple(range(top, -1, -1))),
                (0, (0,)),
            ):
                consumer = subjects.level_consumer(probe)
                asked = self._js.consumer_info(stream, consumer)
                try:
                    ci = await self.denials.unless(
                        f"$JS.API.CONSUMER.INFO.{stream}.{consumer}", asked
                    )
                except Denied:
                    # Not granted yet: a queue created since this daemon connected; the
                    # control plane reconnects it with the new grant in a moment.
                    return None
                except jse.NotFoundError:
                    continue
                return QueueLayout(levels=levels, ack_wait_s=float(ci.config.ack_wait or 30.0))
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot read the consumers of {namespace}/{queue}: {e}") from e
        return None

    async def claim(self, namespace: str, queue: str, level: int, batch: int) -> list[Msg]:
        """Claim up to ``batch`` messages of one level with a ``no_wait`` pull.

        The caller owns each returned message until it calls :meth:`ack_sync`, :meth:`nak`
        or :meth:`term` (or ``ack_wait`` passes without :meth:`in_progress`).

        Returns:
            0 to ``batch`` messages, oldest first.

        Raises:
            QueueNotFound: the stream or the level's consumer does not exist.
            Unavailable: no answer within the request timeout (the pull is abandoned; a
                message the server sends it later is redelivered after ``ack_wait``).
        """
        api = subjects.pull_subject(namespace, queue, level)
        request = json.dumps({"batch": batch, "no_wait": True}).encode()
        async with self._claim_lock:
            inbox, replies, _ = await self._claim_inbox()
            out: list[Msg] = []
            try:
                await self._nc.publish(api, request, reply=inbox)
                while len(out) < batch:
                    msg = await replies.next(self._timeout_s)
                    status = msg.headers.get("Status") if msg.headers else None
                    if status is None:
                        out.append(msg)
                    elif status == "503":
                        raise QueueNotFound(namespace, queue)
                    else:
                        # 404 no messages, 408, 409 (e.g. max ack pending): the pull is over.
                        break
            except _NATS_ERRORS as e:
                # A late answer must not be mistaken for the next pull's: new inbox.
                await self._drop_claim_inbox()
                if out:
                    return out
                raise Unavailable(f"no answer to a claim on {namespace}/{queue}: {e}") from e
            return out

    async def _claim_inbox(self) -> tuple[str, _Replies, Subscription]:
        if self._inbox is None:
            inbox, replies = self._nc.new_inbox(), _Replies()
            self._inbox = (inbox, replies, await self._nc.subscribe(inbox, cb=replies.put))
        return self._inbox

    async def _drop_claim_inbox(self) -> None:
        if self._inbox is not None:
            _, _, sub = self._inbox
            self._inbox = None
            try:
                await sub.unsubscribe()
            except nats.errors.Error:
                pass

    async def in_progress(self, msg: Msg) -> None:
        """Renew the claim's lease for another ``ack_wait``."""
        await self._ack(msg.in_progress(), "renew a claim")

    async def ack(self, msg: Msg) -> None:
        """Acknowledge: the server removes the message. Not waited for: the outcome is
        recorded before, and an ack that never arrives only means a redelivery, fenced as
        stale; an ack sent while disconnected goes out on reconnect (late acks are taken),
        and :meth:`close` flushes the last ones."""
        await self._ack(msg.ack(), "acknowledge a claim")

    async def nak(self, msg: Msg, delay_s: float = 0.0) -> None:
        """Give the message back; it is redelivered after ``delay_s`` (seconds)."""
        await self._ack(msg.nak(delay=delay_s or None), "return a claim")

    async def term(self, msg: Msg) -> None:
        """Stop delivering the message; on a WorkQueue stream it is removed."""
        await self._ack(msg.term(), "terminate a claim")

    async def _ack(self, call: Awaitable[Any], what: str) -> None:
        try:
            await call
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot {what}: {e}") from e

    # ---- events and results --------------------------------------------------------------

    async def publish_events(
        self, namespace: str, queue: str, batch: EventBatch, *, msg_id: str
    ) -> None:
        """Publish one batch to ``LS_EVENTS``; a retry with the same ``msg_id`` is deduplicated.

        Raises:
            Unavailable: not stored (no stream yet, or no answer).
        """
        try:
            await self._js.publish(
                subjects.event_subject(namespace, queue, self._worker_id),
                codec.encode(batch),
                timeout=self._timeout_s,
                headers={"Nats-Msg-Id": msg_id},
            )
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot publish events of {namespace}/{queue}: {e!r}") from e

    async def put_result(
        self, namespace: str, invocation_id: str, epoch: int, result: Result
    ) -> None:
        """Store an attempt's result under ``<ns>.<id>.<epoch>`` in ``LS_RESULTS``.

        Raises:
            TooLarge: the encoded result is over the server's ``max_payload`` (no retry of
                the put can ever store it).
            Unavailable: the bucket does not exist yet, or the put was not stored.
        """
        key = subjects.result_key(namespace, invocation_id, epoch)
        data = codec.encode(result)
        try:
            # What ``kv.put`` does, without the stream lookup a daemon may not make.
            await self._js.publish(
                subjects.result_subject(namespace, invocation_id, epoch),
                data,
                timeout=self._timeout_s,
            )
        except nats.errors.MaxPayloadError as e:
            raise TooLarge(
                f"the result {key} is {len(data):,} bytes, over the NATS server's "
                f"max_payload of {self._nc.max_payload:,} bytes"
            ) from e
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot store the result {key}: {e!r}") from e

    # ---- live logs ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (a publish while it is down would only wait)."""
        return self._nc.is_connected

    async def publish_log(
        self, namespace: str, invocation_id: str, attempt: int, data: bytes, headers: dict[str, str]
    ) -> None:
        """Store one chunk of an attempt's output in ``LS_LOGS`` (see
        :mod:`lakeshore.bus.logs`); a retry with the same ``Nats-Msg-Id`` is stored once.

        Raises:
            Unavailable: not stored (no stream yet, disconnected, or no answer).
        """
        subject = subjects.log_subject(namespace, invocation_id, attempt)
        try:
            await self._js.publish(subject, data, timeout=self._timeout_s, headers=headers)
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot publish the log {subject}: {e!r}") from e

    async def read_code(self, org: str, digest: str) -> bytes:
        """A code snapshot of the daemon's org (:func:`lakeshore.code.bucket.read`).

        Raises:
            SnapshotNotFound: it is not stored.
            Unavailable: it could not be read (disconnected, no answer, refused).
        """
        try:
            return await bucket.read(self._nc.jetstream(timeout=CODE_READ_S), org, digest)
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot read code snapshot {digest}: {e!r}") from e

    # ---- the worker registry -------------------------------------------------------------

    async def register(self, reg: WorkerRegister) -> Worker:
        """Announce the daemon; the answer is its row (id and membership).

        Raises:
            LakeshoreError: the registry's refusal, as its class (e.g. ``InvalidName``).
            Unavailable: no registry answered.
        """
        if reg.id != self._worker_id:
            raise ValueError(f"this connection is daemon {self._worker_id}, not {reg.id}")
        return await self._request(subjects.register_subject(reg.namespace, reg.id), reg, Worker)

    async def heartbeat(self, hb: Heartbeat) -> HeartbeatReply:
        """Report status; the answer carries the current membership and orders.

        Raises:
            LakeshoreError: the registry's refusal.
            Unavailable: no registry answered.
        """
        subject = subjects.heartbeat_subject(hb.namespace, hb.worker_id)
        return await self._request(subject, hb, HeartbeatReply)

    async def held(self, ask: HeldAsk) -> HeldAnswer:
        """Whether an earlier attempt of a redelivered invocation is still held.

        Raises:
            LakeshoreError: the control plane's refusal.
            Unavailable: no control plane answered.
        """
        subject = subjects.held_subject(ask.namespace, self._worker_id)
        return await self._request(subject, ask, HeldAnswer)

    async def _request(self, subject: str, body: object, answer: type[_T]) -> _T:
        try:
            reply = await self._nc.request(subject, codec.encode(body), timeout=self._timeout_s)
        except _NATS_ERRORS as e:
            raise Unavailable(f"no answer on {subject}: {e!r}") from e
        self.refusals.reset()  # connected and answered: a refusal before was not final
        try:
            err = codec.decode(reply.data, _MaybeError).error
            if err is not None:
                raise _error_from(err)
            return codec.decode(reply.data, answer)
        except msgspec.ValidationError as e:
            raise Unavailable(f"unreadable answer on {subject}: {e}") from e

    # ---- core-NATS subscriptions -------------------------------------------------------

    async def subscribe_nudges(
        self, namespace: str, queues: Iterable[str], callback: Callable[[str], None]
    ) -> Subscriptions:
        """Call ``callback(queue)`` whenever work was admitted to one of ``queues``."""
        subs = []

        for queue in queues:

            async def on_nudge(_: Msg, queue: str = queue) -> None:
                callback(queue)

            subs.append(await self._subscribe(subjects.nudge_subject(namespace, queue), on_nudge))
        return Subscriptions(subs)

    async def subscribe_control(
        self, namespace: str, worker_id: str, callback: Callable[[DaemonControl], None]
    ) -> Subscriptions:
        """Call ``callback`` with each :class:`DaemonControl` sent to this daemon."""

        async def on_control(msg: Msg) -> None:
            try:
                order = codec.decode(msg.data, DaemonControl)
            except msgspec.ValidationError as e:
                log.warning("ignoring an unreadable control message: %s", e)
                return
            callback(order)

        subject = subjects.daemon_control_subject(namespace, worker_id)
        return Subscriptions([await self._subscribe(subject, on_control)])

    async def _subscribe(self, subject: str, cb: Callable[[Msg], Awaitable[None]]) -> Subscription:
        try:
            return await self._nc.subscribe(subject, cb=cb)
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot subscribe to {subject}: {e}") from e


def _error_from(detail: ErrorDetail) -> LakeshoreError:
    cls = ERRORS_BY_CODE.get(detail.code, LakeshoreError)
    return cls.from_wire(detail.message)
