"""The control plane's side of lifecycle events and results on JetStream.

Producers (queue actors, daemons) publish :class:`~lakeshore.model.EventBatch` messages on
``ls.<ns>.evt.<queue>``; the Limits-retention stream ``LS_EVENTS`` keeps them for 7 days
and the Recorder drains it through the durable pull consumer ``recorder``. Daemons put each
attempt's :class:`~lakeshore.model.Result` in the KV bucket ``LS_RESULTS`` under
``<ns>.<id>.<epoch>``. The control plane creates all three, idempotently, on every start.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import msgspec
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js import errors as jse
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.kv import KeyValue

from lakeshore.bus import codec, subjects
from lakeshore.bus.port import Delivery
from lakeshore.bus.streams import ensure_stream
from lakeshore.errors import Unavailable
from lakeshore.model import EventBatch, EventType, InvocationEvent, Result

log = logging.getLogger(__name__)

#: Events are kept this long in ``LS_EVENTS`` (seconds).
EVENTS_MAX_AGE_S = 7 * 24 * 3600.0
#: Results are kept this long in ``LS_RESULTS`` (seconds).
RESULTS_TTL_S = 7 * 24 * 3600.0
#: The settings of every stream a tenant publishes to (events, results): a daemon's
#: publish with ``Nats-Rollup`` would otherwise empty every org's messages of the stream,
#: and nobody purges or deletes single messages there (retention by age does). JetStream
#: refuses to take ``deny_*`` back once set.
TENANT_WRITTEN: dict[str, bool] = {
    "allow_rollup_hdrs": False,
    "deny_purge": True,
    "deny_delete": True,
}
#: An event message fetched but not acked within this is redelivered (seconds).
RECORDER_ACK_WAIT_S = 30.0
#: Event messages the Recorder may hold unacked (far above one fetch).
RECORDER_MAX_ACK_PENDING = 100_000


async def ensure_events_stream(
    js: JetStreamContext,
    *,
    replicas: int = 1,
    ack_wait_s: float = RECORDER_ACK_WAIT_S,
    consumer: str = subjects.RECORDER_CONSUMER,
    start_after: int | None = None,
) -> StreamInfo:
    """Create or update ``LS_EVENTS`` and the Recorder's consumer; returns the stream.

    Args:
        consumer: the durable consumer's name (one per control plane: each projects the
            stream into its own file).
        start_after: the last sequence the Recorder's file holds, when it knows it (at a
            control plane's start). A consumer that acknowledged more than that (the file
            is new, or restored from a backup) is made again from there, so the file gets
            every event it lacks; so is one that still holds deliveries to this plane's
            last run (killed before it acked them), which JetStream would otherwise
            redeliver only after ``ack_wait_s``: the history catches up at once.
    """
    cfg = StreamConfig(
        name=subjects.EVENTS_STREAM,
        subjects=[subjects.EVENTS_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=EVENTS_MAX_AGE_S,
        num_replicas=replicas,
        **TENANT_WRITTEN,
    )
    info = await ensure_stream(js, cfg)
    config = ConsumerConfig(
        durable_name=consumer,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=RECORDER_MAX_ACK_PENDING,
        num_replicas=replicas,
    )
    try:
        existing = await js.consumer_info(cfg.name, consumer)
    except jse.NotFoundError:
        existing = None
    if existing is not None and start_after is not None:
        acked = existing.ack_floor.stream_seq if existing.ack_floor is not None else 0
        if acked > start_after:
            log.warning(
                "the Recorder's file holds events up to %d, its consumer %s acknowledged up "
                "to %d: reading the events stream again from %d",
                start_after, consumer, acked, start_after + 1,
            )  # fmt: skip
        elif existing.num_ack_pending:
            log.info(
                "the Recorder's consumer %s holds %d event message(s) delivered to this "
                "control plane's last run and never acknowledged: reading the events stream "
                "again from %d now rather than after their %g s ack wait",
                consumer, existing.num_ack_pending, start_after + 1, ack_wait_s,
            )  # fmt: skip
        if acked > start_after or existing.num_ack_pending:
            await js.delete_consumer(cfg.name, consumer)
            existing = None
    if existing is not None:
        # Keep where it is; the settings that may change between runs follow ours.
        config.deliver_policy = existing.config.deliver_policy
        config.opt_start_seq = existing.config.opt_start_seq
    elif start_after and start_after <= info.state.last_seq:
        config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start_after + 1
    elif start_after:
        log.warning(
            "the events stream ends at %d, before this file's position %d (the stream was "
            "made anew): reading it from its start",
            info.state.last_seq, start_after,
        )  # fmt: skip
    await js.add_consumer(cfg.name, config)
    return info


async def ensure_results_bucket(js: JetStreamContext, *, replicas: int = 1) -> KeyValue:
    """Bind ``LS_RESULTS``, creating it (history 1, 7 days TTL) when it does not exist; its
    stream takes no rollup and no purge (:data:`TENANT_WRITTEN`), a bucket made before
    that included."""
    try:
        kv = await js.key_value(subjects.RESULTS_BUCKET)
    except jse.BucketNotFoundError:
        kv = await js.create_key_value(
            KeyValueConfig(
                bucket=subjects.RESULTS_BUCKET,
                history=1,
                ttl=RESULTS_TTL_S,
                storage=StorageType.FILE,
                replicas=replicas,
            )
        )
    config = (await js.stream_info(subjects.RESULTS_STREAM)).config
    if any(getattr(config, k) != v for k, v in TENANT_WRITTEN.items()):
        # nats-py makes every bucket with rollups allowed (its own purge is one).
        await js.update_stream(dataclasses.replace(config, **TENANT_WRITTEN))
    return kv


class EventFeed:
    """Pulls event batches for the Recorder and reads results; one per control plane.

    Args:
        nc: a connected client (the control plane's bus connection); not closed here.
        replicas: JetStream replicas of the stream, consumer and bucket it creates.
        ack_wait_s: a fetched message not acked within this is redelivered (seconds).
        consumer, start_after: the Recorder's consumer and its file's position (see
            :func:`ensure_events_stream`).
    """

    def __init__(
        self,
        nc: NatsClient,
        *,
        replicas: int = 1,
        ack_wait_s: float = RECORDER_ACK_WAIT_S,
        consumer: str = subjects.RECORDER_CONSUMER,
        start_after: int | None = None,
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=5)
        self._replicas, self._ack_wait_s = replicas, ack_wait_s
        self._consumer, self._start_after = consumer, start_after
        self._sub: JetStreamContext.PullSubscription | None = None
        self._kv: KeyValue | None = None

    async def ensure(self) -> None:
        """Create or update the stream, consumer and bucket, and bind the pull subscription.

        Idempotent; the Recorder calls it at every start and when its consumer vanished.

        Raises:
            Unavailable: NATS did not answer.
        """
        try:
            await ensure_events_stream(
                self._js,
                replicas=self._replicas,
                ack_wait_s=self._ack_wait_s,
                consumer=self._consumer,
                start_after=self._start_after,
            )
            self._start_after = None  # checked once: later calls re-ensure in place
            self._kv = await ensure_results_bucket(self._js, replicas=self._replicas)
            if self._sub is None:
                self._sub = await self._js.pull_subscribe_bind(
                    self._consumer, stream=subjects.EVENTS_STREAM
                )
        except (nats.errors.Error, jse.Error, TimeoutError, OSError) as e:
            raise Unavailable(
                f"cannot set up the events stream {subjects.EVENTS_STREAM}: {e}"
            ) from e

    async def close(self) -> None:
        """Drop the pull subscription; undelivered messages stay in the stream."""
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except nats.errors.Error as e:
                log.debug("events feed: unsubscribe failed: %s", e)

    async def fetch(self, max_batch: int, timeout_s: float) -> list[Delivery]:
        """Wait up to ``timeout_s`` for event messages; returns as soon as one is there.

        Messages that do not decode as an ``EventBatch`` are terminated (never redelivered)
        and not returned; events naming another namespace or queue than their subject are
        dropped from their batch. Both are logged.

        Returns:
            Up to ``max_batch`` deliveries in stream order; ``[]`` when none came in time.

        Raises:
            Unavailable: NATS failed otherwise (the caller retries).
        """
        if self._sub is None:
            await self.ensure()
        assert self._sub is not None
        try:
            # nats-py's lingering fetch(N) waits for N messages until its deadline, so an
            # idle feed waits for one message only; the backlog behind it (its metadata
            # says how much) is then taken at once by the no-wait probe of a second fetch.
            msgs = await self._sub.fetch(1, timeout=timeout_s)
        except TimeoutError:
            return []
        except jse.ServiceUnavailableError as e:
            log.warning("events feed: consumer unavailable (%s); re-ensuring it", e)
            await self.ensure()
            return []
        except (nats.errors.Error, jse.Error) as e:
            raise Unavailable(f"cannot fetch from {subjects.EVENTS_STREAM}: {e}") from e
        behind = min(max_batch - 1, msgs[-1].metadata.num_pending or 0) if msgs else 0
        if behind:
            try:
                msgs += await self._sub.fetch(behind, timeout=timeout_s)
            except (TimeoutError, nats.errors.Error, jse.Error):
                pass  # the backlog waits for the next fetch; what we have is ours to record
        out = []
        for msg in msgs:
            delivery = await self._decode(msg)
            if delivery is not None:
                out.append(delivery)
        return out

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge recorded deliveries (fire and forget: a lost ack means a redelivery,
        which the Recorder recognises)."""
        for d in deliveries:
            try:
                await d.msg.ack()
            except nats.errors.MsgAlreadyAckdError:
                pass
            except nats.errors.Error as e:
                log.warning("events feed: ack of message %d failed: %s", d.seq, e)

    async def progress(self) -> tuple[int, int]:
        """``(ack_floor, last_seq)``: every message at or below the ack floor is acked for
        good; no message above ``last_seq`` exists.

        Raises:
            Unavailable: NATS did not answer.
        """
        try:
            ci = await self._js.consumer_info(subjects.EVENTS_STREAM, self._consumer)
            si = await self._js.stream_info(subjects.EVENTS_STREAM)
        except (nats.errors.Error, jse.Error, TimeoutError) as e:
            raise Unavailable(f"cannot read the progress of {subjects.EVENTS_STREAM}: {e}") from e
        floor = ci.ack_floor.stream_seq if ci.ack_floor is not None else 0
        return floor, si.state.last_seq

    async def get_result(self, namespace: str, invocation_id: str, epoch: int) -> Result | None:
        """The result an attempt stored, or ``None`` (never stored, or expired).

        Raises:
            Unavailable: NATS did not answer.
        """
        if self._kv is None:
            await self.ensure()
        assert self._kv is not None
        key = subjects.result_key(namespace, invocation_id, epoch)
        try:
            entry = await self._kv.get(key)
        except jse.KeyNotFoundError:
            return None
        except (nats.errors.Error, jse.Error, TimeoutError) as e:
            raise Unavailable(f"cannot read result {key}: {e}") from e
        try:
            return codec.decode(entry.value or b"", Result)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            log.warning("result %s does not decode: %s", key, e)
            return None

    async def watch_result(self, namespace: str, invocation_id: str) -> ResultWatch:
        """Hear the result puts of an invocation on core NATS as they pass (a result wait
        then answers without reading the bucket).

        Raises:
            Unavailable: NATS did not take the subscription.
        """
        subject = subjects.result_subject(namespace, invocation_id, "*")
        try:
            return ResultWatch(await self._nc.subscribe(subject))
        except nats.errors.Error as e:
            raise Unavailable(f"cannot watch {subject}: {e}") from e

    async def _decode(self, msg: Msg) -> Delivery | None:
        meta = msg.metadata
        where = subjects.event_subject_parts(msg.subject)
        try:
            if where is None:
                raise ValueError(f"not an event subject: {msg.subject!r}")
            batch = codec.decode(msg.data, EventBatch)
        except (ValueError, msgspec.ValidationError, msgspec.DecodeError) as e:
            seq = meta.sequence.stream
            log.warning("events feed: dropping message %d on %s: %s", seq, msg.subject, e)
            await msg.term()
            return None
        ns, queue, publisher = where
        events = [e for e in batch.events if _may_publish(publisher, ns, queue, e)]
        if len(events) != len(batch.events):
            dropped = len(batch.events) - len(events)
            log.warning(
                "events feed: message %d on %s: dropped %d event(s) its publisher may not "
                "publish (another queue's, or another daemon's)",
                meta.sequence.stream, msg.subject, dropped,
            )  # fmt: skip
            batch = EventBatch(events=events)
        return Delivery(batch, meta.sequence.stream, meta.num_delivered, msg, meta.timestamp)


class ResultWatch:
    """The result puts of one invocation heard so far (see :meth:`EventFeed.watch_result`)."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub
        self._heard: dict[str, bytes] = {}

    async def result(self, epoch: int) -> Result | None:
        """The result that attempt put, if heard. A put is heard as it passes; it was stored
        if the attempt's outcome was accepted (a daemon reports only after its put)."""
        while self._sub.pending_msgs:
            msg = await self._sub.next_msg(timeout=1)
            self._heard[msg.subject.rpartition(".")[2]] = msg.data
        data = self._heard.get(str(epoch))
        if data is None:
            return None
        try:
            return codec.decode(data, Result)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None

    async def close(self) -> None:
        try:
            await self._sub.unsubscribe()
        except nats.errors.Error as e:
            log.debug("result watch: unsubscribe failed: %s", e)


#: What a daemon reports (everything else is the control plane's to say).
DAEMON_EVENTS = frozenset(
    {
        EventType.CLAIMED,
        EventType.STARTED,
        EventType.SUCCEEDED,
        EventType.FAILED,
        EventType.RETRYING,
        EventType.CANCELLED,
        EventType.STOPPING,
    }
)


def _may_publish(publisher: str, namespace: str, queue: str, ev: InvocationEvent) -> bool:
    """Whether ``publisher`` (its subject's last token) may have published ``ev``: events
    of its subject's queue only, and a daemon only its own reports."""
    if (ev.namespace, ev.queue) != (namespace, queue):
        return False
    if publisher == subjects.PLANE_PUBLISHER:
        return True
    return ev.worker == publisher and ev.type in DAEMON_EVENTS
