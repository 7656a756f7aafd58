"""The NATS JetStream bus: connection, queue streams and their durable consumers.

Each queue is a WorkQueue stream with explicit acks; every daemon of the queue pulls from
the same durable consumer per priority level, so each message goes to one daemon at a time.
``max_msgs`` is the queue's ``max_depth`` with ``discard=new``: JetStream itself refuses a
publish to a full queue, and depth counts queued plus in-flight invocations.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import nats
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js import errors as jse
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from lakeshore.bus import codec, subjects
from lakeshore.bus.connection import NatsLogin, connect_nats
from lakeshore.bus.port import Published, QueueCounts
from lakeshore.bus.reserve import ERR_INSUFFICIENT_RESOURCES, StoreReserve, store_full
from lakeshore.errors import InsufficientStorage, Unavailable
from lakeshore.model import DaemonControl, EventBatch

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A retried submit inside this window is deduplicated by its Nats-Msg-Id (seconds).
DUPLICATE_WINDOW_S = 600.0
#: JetStream's error code for a publish refused by ``max_msgs`` with ``discard=new``.
ERR_STREAM_FULL = 10077
#: JetStream's error code for a message that is not (or no longer) stored.
ERR_NO_MESSAGE = 10057
#: Concurrent publishes in flight per window (sequential publishes are ~5x slower; a
#: window's acks come back as one burst of callbacks that other requests wait behind).
PUBLISH_WINDOW = 100
#: A claim not kept alive with in_progress() for this long is redelivered (seconds).
ACK_WAIT_S = 60.0
#: JetStream API requests about a queue's stream (ensuring it, reading its counts) time
#: out after ``_SHORT_REQUEST_S``: a stream electing its leader answers nothing, and one
#: long request would wait on past the election. Ensuring asks again for ``ENSURE_S``.
ENSURE_S = 5.0
_SHORT_REQUEST_S = 1.0
#: Undelivered invocations read per direct get (``pending_messages``).
PENDING_BATCH = 256
_RETRY_S = 0.1
#: nats-py's answers of a JetStream that cannot answer yet (no stream leader, no responders).
_NOT_YET = (TimeoutError, nats.errors.NoRespondersError, jse.ServiceUnavailableError)


class NatsBus:
    """The control plane's handle on NATS (the :class:`~lakeshore.bus.port.Bus` port).

    Build it with :meth:`connect`.
    """

    def __init__(
        self, nc: NatsClient, js: JetStreamContext, replicas: int, ack_wait_s: float = ACK_WAIT_S
    ) -> None:
        self._nc = nc
        self._js = js
        self._js_short = nc.jetstream(timeout=_SHORT_REQUEST_S)
        self._replicas = replicas
        self._ack_wait_s = ack_wait_s
        self._answering: set[asyncio.Task[None]] = set()
        #: consumers ensured in the background, per stream (see :meth:`ensure_queue`)
        self._ensuring: dict[str, asyncio.Task[None]] = {}
        #: room kept for the control plane's own writes, once a leader armed it
        self._reserve: StoreReserve | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        login: NatsLogin,
        *,
        replicas: int = 1,
        ack_wait_s: float = ACK_WAIT_S,
        name: str = "lakeshore",
    ) -> NatsBus:
        """Connect (see :func:`lakeshore.bus.connection.connect_nats`)."""
        nc = await connect_nats(url, name=name, login=login)
        return cls(nc, nc.jetstream(timeout=5), replicas, ack_wait_s)

    @property
    def nc(self) -> NatsClient:
        """The connection, for other bus modules (events feed, responders)."""
        return self._nc

    @property
    def max_payload(self) -> int:
        """The largest message the server takes (bytes)."""
        return self._nc.max_payload

    @property
    def connected(self) -> bool:
        return self._nc.is_connected

    async def close(self) -> None:
        tasks = [*self._answering, *self._ensuring.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._reserve is not None:
            await self._reserve.close()
        await self._nc.close()

    async def keep_reserve(self) -> None:
        """Keep room in JetStream's store for this control plane's own writes (a leader's
        term, see :mod:`lakeshore.bus.reserve`); from now on a write refused for want of
        room gives it up, and work is refused until it is back."""
        if self._reserve is None:
            self._reserve = StoreReserve(self._js_short, replicas=self._replicas)
        async with self._errors("keep room in JetStream's store"):
            await self._reserve.arm()

    async def ensure_queue(
        self,
        namespace: str,
        queue: str,
        *,
        levels: int,
        max_depth: int | None,
        admitting: bool = True,
    ) -> None:
        """Create or update the queue's stream and its per-level durable consumers.

        Idempotent: the control plane calls it on every start and on every change of
        admission settings. Each consumer is a raft group of its own, which may still be
        electing its leader when the stream answers (a NATS node just came back): for a
        stream that exists already (a new leader's start) the consumers are asked once,
        then ensured in the background until they answer, so that a takeover and the
        submits behind it wait for the stream alone.

        A stream not ``admitting`` is bound to :func:`~lakeshore.bus.subjects.closed_subjects`
        instead of the queue's subjects: a publish to them finds no stream (nats-server
        takes the update; the consumers, filtered on the level subjects the stored
        messages keep, go on delivering them).
        """
        bound = subjects.queue_subjects if admitting else subjects.closed_subjects
        cfg = StreamConfig(
            name=subjects.queue_stream(namespace, queue),
            subjects=[bound(namespace, queue)],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            discard=DiscardPolicy.NEW,
            max_msgs=max_depth if max_depth is not None else -1,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=self._replicas,
            # Read by the control plane only (pending_messages): no tenant's grant has it.
            allow_direct=True,
        )
        assert cfg.name is not None
        name = cfg.name

        async def consumers() -> None:
            await self._ensure_consumers(name, namespace, queue, levels)

        async with self._errors(f"ensure the stream of {namespace}/{queue}"):
            existed = await _until_answered(lambda: self._ensure_stream(cfg))
            if not existed:
                await _until_answered(consumers)
                return
            try:
                await consumers()
            except _NOT_YET as e:
                self._ensure_later(name, consumers, e)

    async def _ensure_stream(self, cfg: StreamConfig) -> bool:
        """Create the stream, or update it if its config differs; whether it existed."""
        js = self._js_short
        assert cfg.name is not None
        try:
            info = await js.stream_info(cfg.name)
        except jse.NotFoundError:
            await js.add_stream(cfg)
            return False
        # Every start ensures every queue: an update only when something changed.
        if not same_stream(info.config, cfg):
            await js.update_stream(cfg)
        return True

    def _ensure_later(
        self, stream: str, consumers: Callable[[], Awaitable[None]], why: BaseException
    ) -> None:
        if stream in self._ensuring:
            return
        log.info("consumers of %s did not answer (%r): ensured in the background", stream, why)
        task = asyncio.ensure_future(self._keep_ensuring(stream, consumers))
        self._ensuring[stream] = task
        task.add_done_callback(lambda _: self._ensuring.pop(stream, None))

    async def _keep_ensuring(self, stream: str, consumers: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(_RETRY_S)
            try:
                await consumers()
            except _NOT_YET:
                continue
            except (nats.errors.Error, jse.Error, OSError) as e:  # the stream deleted meanwhile
                log.warning("consumers of %s not ensured: %s", stream, e)
                return
            log.info("consumers of %s ensured", stream)
            return

    async def _ensure_consumers(self, stream: str, namespace: str, queue: str, levels: int) -> None:
        js = self._js_short
        # Creating a durable consumer with its current config changes nothing.
        await asyncio.gather(
            *(
                js.add_consumer(
                    stream,
                    ConsumerConfig(
                        durable_name=subjects.level_consumer(level),
                        filter_subject=subjects.level_subject(namespace, queue, level),
                        ack_policy=AckPolicy.EXPLICIT,
                        ack_wait=self._ack_wait_s,
                        max_ack_pending=10_000,
                        num_replicas=self._replicas,
                    ),
                )
                for level in range(levels)
            )
        )

    async def delete_queue(self, namespace: str, queue: str) -> None:
        """Delete the queue's stream (and with it every pending invocation)."""
        async with self._errors(f"delete the stream of {namespace}/{queue}"):
            try:
                await self._js.delete_stream(subjects.queue_stream(namespace, queue))
            except jse.NotFoundError:
                pass

    async def queue_counts(self, namespace: str, queue: str, *, levels: int) -> QueueCounts:
        stream = subjects.queue_stream(namespace, queue)
        async with self._errors(f"read the counts of {namespace}/{queue}"):
            try:
                si = await self._js_short.stream_info(stream)
                infos = await self._level_consumers(stream, levels)
            except jse.NotFoundError:
                return QueueCounts(0, 0, 0)
        return QueueCounts(
            pending=sum(ci.num_pending or 0 for ci in infos),
            running=sum(ci.num_ack_pending or 0 for ci in infos),
            depth=si.state.messages,
        )

    async def queue_backlog(self, namespace: str, queue: str, *, levels: int) -> int:
        stream = subjects.queue_stream(namespace, queue)
        async with self._errors(f"read the backlog of {namespace}/{queue}"):
            try:
                si = await self._js_short.stream_info(stream)
            except jse.NotFoundError:
                return 0
        try:
            infos = await self._level_consumers(stream, levels)
        except (nats.errors.Error, jse.Error, TimeoutError, OSError) as e:
            # A consumer is its own raft group: after a NATS node comes back it may still be
            # electing its leader while the stream answers.
            log.debug("backlog of %s/%s: a consumer did not answer (%s)", namespace, queue, e)
            return si.state.messages
        return sum(ci.num_pending or 0 for ci in infos)

    async def _level_consumers(self, stream: str, levels: int) -> list[ConsumerInfo]:
        """The queue's per-level consumers, asked side by side."""
        return await asyncio.gather(
            *(
                self._js_short.consumer_info(stream, subjects.level_consumer(level))
                for level in range(levels)
            )
        )

    async def publish_work(
        self, namespace: str, queue: str, items: list[tuple[bytes, int, str]]
    ) -> list[Published | None]:
        """Publish invocations concurrently, in windows, each with its ``Nats-Msg-Id``.

        Args:
            items: ``(payload, level, msg_id)`` per invocation.

        Returns:
            Per item: a :class:`Published`, or ``None`` when the queue was full (10077).

        Raises:
            InsufficientStorage: JetStream's store is full (err_code 10023).
            Unavailable: NATS failed otherwise (no stream, timeout): the items before the
                failure may have been admitted; resubmitting with the same ids is safe.
        """
        if self._reserve is not None:
            self._reserve.check(f"admit work to {namespace}/{queue}")
        out: list[Published | None] = []
        for start in range(0, len(items), PUBLISH_WINDOW):
            window = items[start : start + PUBLISH_WINDOW]
            answers = await asyncio.gather(
                *(self._publish_one(namespace, queue, *item) for item in window),
                return_exceptions=True,
            )
            for answer in answers:
                if NatsErrors.store_full(answer):
                    self.give_up_reserve()
                    raise NatsErrors.full(f"admit work to {namespace}/{queue}") from answer
                if isinstance(answer, BaseException):
                    raise Unavailable(
                        f"could not publish to {namespace}/{queue}: {answer!r}"
                    ) from answer
                out.append(answer)
        return out

    async def _publish_one(
        self, namespace: str, queue: str, payload: bytes, level: int, msg_id: str
    ) -> Published | None:
        try:
            ack = await self._js.publish(
                subjects.level_subject(namespace, queue, level),
                payload,
                headers={"Nats-Msg-Id": msg_id},
            )
        except jse.ServiceUnavailableError as e:
            if e.err_code == ERR_STREAM_FULL:
                return None
            raise
        return Published(seq=ack.seq, duplicate=bool(ack.duplicate))

    async def oldest_pending(
        self, namespace: str, queue: str, *, levels: int
    ) -> tuple[int, bytes] | None:
        """The oldest invocation not yet delivered, over every level: (sequence, payload)."""
        stream = subjects.queue_stream(namespace, queue)
        oldest: tuple[int, bytes] | None = None
        async with self._errors(f"find the oldest pending of {namespace}/{queue}"):
            for level in range(levels):
                try:
                    ci = await self._js.consumer_info(stream, subjects.level_consumer(level))
                except jse.NotFoundError:
                    continue  # no such queue (or level): nothing pending there
                if not ci.num_pending:
                    continue
                start = (ci.delivered.stream_seq or 0) + 1
                try:
                    msg = await self._js.get_msg(
                        stream,
                        seq=start,
                        subject=subjects.level_subject(namespace, queue, level),
                        next=True,
                    )
                except jse.NotFoundError:
                    continue
                if oldest is None or msg.seq < oldest[0]:
                    oldest = (msg.seq, msg.data or b"")
        return oldest

    async def pending_messages(
        self, namespace: str, queue: str, *, levels: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """Undelivered invocations, read after each level's delivered floor in batches of
        direct gets (for a queue's removal and a term's look for unrecorded submissions;
        one by one from a stream that does not allow direct gets yet)."""
        stream = subjects.queue_stream(namespace, queue)
        out: list[tuple[int, bytes]] = []
        async with self._errors(f"read the pending invocations of {namespace}/{queue}"):
            for level in range(levels):
                try:
                    ci = await self._js.consumer_info(stream, subjects.level_consumer(level))
                except jse.NotFoundError:
                    continue
                seq = (ci.delivered.stream_seq or 0) + 1
                subject = subjects.level_subject(namespace, queue, level)
                while len(out) < limit:
                    want = min(PENDING_BATCH, limit - len(out))
                    got = await self._direct_batch(stream, subject, seq, want)
                    if got is None:
                        got = await self._one_by_one(stream, subject, seq, want)
                    out += got
                    if len(got) < want:
                        break
                    seq = got[-1][0] + 1
        return out

    async def stored_messages(
        self, namespace: str, queue: str, seqs: Sequence[int]
    ) -> list[tuple[int, bytes]]:
        """Those of the messages at ``seqs`` the stream still holds: one batched direct get
        over their span (they are close: one producer's submit), the rest left out."""
        wanted = sorted({s for s in seqs if s > 0})
        if not wanted:
            return []
        stream = subjects.queue_stream(namespace, queue)
        # The level subjects the messages keep, whether the stream is bound to them or not.
        every_level = subjects.queue_subjects(namespace, queue)
        span = wanted[-1] - wanted[0] + 1
        async with self._errors(f"read stored invocations of {namespace}/{queue}"):
            got = await self._direct_batch(stream, every_level, wanted[0], span)
            if got is None:
                got = await self._one_by_one(stream, every_level, wanted[0], span)
        keep = set(wanted)
        return [(seq, data) for seq, data in got if seq in keep and seq <= wanted[-1]]

    async def listen(
        self, subject: str, handler: Callable[[str, bytes], Awaitable[None]]
    ) -> Subscription:
        """Take core NATS messages on ``subject`` (wildcards allowed), one after the other,
        with ``handler(subject, data)``; it must not raise."""

        async def on_msg(msg: Msg) -> None:
            await handler(msg.subject, msg.data)

        sub = await self._nc.subscribe(subject, cb=on_msg, pending_msgs_limit=65536)
        await self._nc.flush()
        return sub

    async def _direct_batch(
        self, stream: str, subject: str, seq: int, n: int
    ) -> list[tuple[int, bytes]] | None:
        """Up to ``n`` stored messages of ``subject`` from ``seq`` on, in one batched direct
        get (``None``: the stream does not answer direct gets)."""
        got: list[tuple[int, bytes]] = []
        ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def take(msg: Msg) -> None:
            headers = msg.headers or {}
            if (status := headers.get("Status")) is not None:
                if not ended.done():  # 204: the end of the batch; 404: nothing there
                    ended.set_result(status)
            else:
                got.append((int(headers["Nats-Sequence"]), msg.data or b""))

        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox, cb=take, pending_msgs_limit=4 * n + 16)
        try:
            ask = {"seq": seq, "batch": n, "next_by_subj": subject}
            await self._nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(ask).encode(), inbox)
            status = await asyncio.wait_for(ended, _SHORT_REQUEST_S * 5)
        finally:
            await sub.unsubscribe()
        return None if status == "503" else got  # 503: no responder (direct gets not allowed)

    async def _one_by_one(
        self, stream: str, subject: str, seq: int, n: int
    ) -> list[tuple[int, bytes]]:
        got: list[tuple[int, bytes]] = []
        while len(got) < n:
            try:
                msg = await self._js.get_msg(stream, seq=seq, subject=subject, next=True)
            except jse.NotFoundError:
                break
            got.append((msg.seq, msg.data or b""))
            seq = msg.seq + 1
        return got

    async def delete_message(self, namespace: str, queue: str, seq: int) -> bool:
        """Remove one stored invocation; ``False`` when it is already gone."""
        async with self._errors(f"delete message {seq} of {namespace}/{queue}"):
            stream = subjects.queue_stream(namespace, queue)
            return bool(await _unless_gone(self._js.delete_msg(stream, seq)))

    async def redeliver_now(self, namespace: str, queue: str, seq: int) -> bool:
        """NAK the claimed invocation ``seq`` on its daemon's behalf (its daemon is lost).

        JetStream has no call for it; a NAK names the message by its stream sequence and a
        delivery sequence of its consumer (any one the consumer has delivered and not acked
        past), so it is sent as the daemon would have sent it, on the level's consumer read
        from the message's subject. The NAK is a publish JetStream does not answer: the
        answer is whether the message is claimed now."""
        stream = subjects.queue_stream(namespace, queue)
        async with self._errors(f"hand invocation {seq} of {namespace}/{queue} back"):
            msg = await _unless_gone(self._js.get_msg(stream, seq))
            if msg is None:
                return False
            consumer = subjects.level_consumer(int(msg.subject.rsplit(".p", 1)[1]))
            info = await self._js.consumer_info(stream, consumer)
            if seq <= info.ack_floor.stream_seq or seq > info.delivered.stream_seq:
                return False  # never delivered, or acked
            dseq = info.delivered.consumer_seq
            await self._nc.publish(f"$JS.ACK.{stream}.{consumer}.1.{seq}.{dseq}.0.0", b"-NAK")
            await self._nc.flush()
            return True

    async def nudge(self, namespace: str, queue: str) -> None:
        """Wake idle daemons of ``queue`` (core NATS, best effort)."""
        async with self._errors(f"wake the daemons of {namespace}/{queue}"):
            await self._nc.publish(subjects.nudge_subject(namespace, queue), b"")

    async def publish_events(self, namespace: str, queue: str, batch: EventBatch) -> int:
        async with self._errors(f"record events of {namespace}/{queue}"):
            subject = subjects.event_subject(namespace, queue)
            return (await self._js.publish(subject, codec.encode(batch))).seq

    async def send_control(self, namespace: str, worker_id: str, control: DaemonControl) -> None:
        """Tell a daemon to cancel a run or retire (core NATS, best effort)."""
        async with self._errors(f"tell daemon {worker_id} of {namespace}"):
            await self._nc.publish(
                subjects.daemon_control_subject(namespace, worker_id), codec.encode(control)
            )

    async def respond(
        self,
        subject: str,
        handler: Callable[[str, bytes, str], Awaitable[bytes | None]],
        *,
        replies_under: str,
        steered: Callable[[str, str], None],
        group: str = "",
        concurrent: bool = False,
    ) -> Subscription:
        """Answer requests on ``subject`` (wildcards allowed) with
        ``handler(subject, data, reply)``; its ``None`` answers nothing.

        The requester chooses the reply subject and this connection may publish anywhere,
        so an answer goes only below ``replies_under`` (the inboxes of the kind of client
        that asks): any other request is dropped before the handler sees it, with
        ``steered(subject, reply)``. A handler must not raise (it answers errors). Requests
        are handled one after the other, or each in its own task with ``concurrent`` (for
        requests that may wait, such as a result's long wait); :meth:`close` cancels those
        still running. With ``group``, one member of the queue group answers each request.
        """

        async def answer(msg: Msg) -> None:
            if not subjects.under(msg.reply, replies_under):
                steered(msg.subject, msg.reply)
                return
            reply = await handler(msg.subject, msg.data, msg.reply)
            if reply is None:
                return
            try:
                await self._nc.publish(msg.reply, reply)
            except nats.errors.Error as e:  # the asker is gone, or NATS is
                log.debug("no answer on %s: %s", msg.subject, e)

        async def on_msg(msg: Msg) -> None:
            if not concurrent:
                await answer(msg)
                return
            task = asyncio.create_task(answer(msg))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

        sub = await self._nc.subscribe(subject, group, cb=on_msg, pending_msgs_limit=65536)
        # Once this returns the server routes requests here: a daemon registering the moment
        # the control plane is up must not get "no responders".
        await self._nc.flush()
        return sub

    def _errors(self, what: str) -> NatsErrors:
        return NatsErrors(what, on_full=self.give_up_reserve)

    def give_up_reserve(self) -> None:
        """A write of this control plane's was refused because JetStream's store is full:
        its kept room goes to its own writes, and work is refused until room is back (a
        no-op outside a leader's term, which keeps no room)."""
        if self._reserve is not None:
            self._reserve.give_up()


async def _until_answered(step: Callable[[], Awaitable[T]]) -> T:
    """``step()``, asked again while JetStream elects a leader, for ``ENSURE_S`` at most."""
    deadline = asyncio.get_running_loop().time() + ENSURE_S
    while True:
        try:
            return await step()
        except _NOT_YET:
            if asyncio.get_running_loop().time() + _RETRY_S >= deadline:
                raise
        await asyncio.sleep(_RETRY_S)


def same_stream(have: StreamConfig, want: StreamConfig) -> bool:
    """Whether a stream's config already has every setting a queue's stream is given."""
    return (
        list(have.subjects or []) == list(want.subjects or [])
        and have.retention == want.retention
        and have.storage == want.storage
        and have.discard == want.discard
        and (have.max_msgs if have.max_msgs is not None else -1) == want.max_msgs
        and abs((have.duplicate_window or 0) - (want.duplicate_window or 0)) < 1e-3
        and (have.num_replicas or 1) == (want.num_replicas or 1)
        and bool(have.allow_direct) == bool(want.allow_direct)
    )


class NatsErrors:
    """Turns NATS failures into :class:`Unavailable` with what was being done
    (:class:`InsufficientStorage` when JetStream's store is full)."""

    ERR_INSUFFICIENT_RESOURCES = ERR_INSUFFICIENT_RESOURCES
    store_full = staticmethod(store_full)

    @classmethod
    def full(cls, what: str) -> InsufficientStorage:
        return InsufficientStorage(
            what, f"NATS JetStream refused it, insufficient resources (err_code "
            f"{cls.ERR_INSUFFICIENT_RESOURCES}): its store is full"
        )  # fmt: skip

    def __init__(self, what: str, on_full: Callable[[], None] = lambda: None) -> None:
        self._what, self._on_full = what, on_full

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        if exc is None or isinstance(exc, jse.NotFoundError):
            return False
        if self.store_full(exc):
            self._on_full()
            raise self.full(self._what) from exc
        if isinstance(exc, (nats.errors.Error, jse.Error, TimeoutError, OSError)):
            raise Unavailable(f"NATS did not answer while trying to {self._what}: {exc}") from exc
        return False


async def _unless_gone(call: Awaitable[T]) -> T | None:
    """What ``call`` on one stored message answers; ``None`` when the message is not stored
    (already acked, deleted, or past the end)."""
    try:
        return await call
    except (jse.NotFoundError, jse.BadRequestError):
        return None
    except jse.APIError as e:
        if e.err_code == ERR_NO_MESSAGE:
            return None
        raise
