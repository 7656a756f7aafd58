"""``LS_STATE``: the replicated truth of the control plane's rows.

One subject per row (``lsstate.<kind>.<key…>``), each message a whole
:class:`~lakeshore.model.images.Image`; the stream keeps one message per subject, so it is
a compacted changelog that a replica can replay from any sequence, from 1 on a new file.
Deletions are tombstones (an image without a row) and never expire; idempotency keys, and
their tombstones, carry a per-message TTL and leave the stream when they would leave the
store. The stream also
holds the leaders' epoch records (``lsstate.epoch``): every write of :class:`StateLog` is
fenced on the last of them (:class:`~lakeshore.bus.fenced.FencedLog`).

:class:`StateTail` reads the stream in order from a sequence on, for the projector: as a
standby follows it (a consumer), and as a new leader catches up to its epoch record (direct
reads, which any replica answers: no consumer to create while the cluster elects).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js import errors as jse
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)

from lakeshore.bus import subjects
from lakeshore.bus.fenced import FencedLog
from lakeshore.bus.nats import NatsErrors
from lakeshore.bus.streams import ensure_stream
from lakeshore.errors import NotLeader, Unavailable
from lakeshore.model.images import Image, encode

log = logging.getLogger(__name__)

STATE_STREAM = subjects.STATE_STREAM
#: The header naming the epoch of the leader that wrote a row image.
EPOCH_HEADER = "Ls-Epoch"
#: A key value that is not a plain subject token is named by its digest.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: JetStream request timeout of a takeover's epoch record: while the stream elects a
#: leader (a NATS node lost) it is asked again soon rather than waited on.
_BEGIN_TIMEOUT_S = 0.5
#: JetStream request timeout of a standby's tail (opening its consumer). A takeover does
#: not wait on it: it reads what it lacks directly (:meth:`StateTail.read_stored`).
_TAIL_API_TIMEOUT_S = 5.0
#: Messages a tail asks for at once.
_BATCH = 512
#: Bytes of messages one direct read asks for at most (under NATS' default max payload).
_BATCH_BYTES = 512 * 1024


async def ensure_state_stream(js: JetStreamContext, *, replicas: int = 1) -> StreamInfo:
    """Create or update ``LS_STATE`` (compacted: one message per subject, kept forever)."""
    cfg = StreamConfig(
        name=STATE_STREAM,
        subjects=[subjects.STATE_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_msgs_per_subject=1,
        discard=DiscardPolicy.OLD,
        allow_msg_ttl=True,
        allow_direct=True,
        num_replicas=replicas,
    )
    return await ensure_stream(js, cfg)


def subject_of(image: Image) -> str:
    """``lsstate.<kind>.<key token>…`` (a token that is not subject-safe: ``~<digest>``)."""
    return ".".join([subjects.STATE_PREFIX, image.kind, *(_token(v) for v in image.key)])


def _token(value: object) -> str:
    text = "" if value is None else str(value)
    if _TOKEN.fullmatch(text):
        return text
    return "~" + hashlib.sha256(text.encode()).hexdigest()[:40]


class StateLog:
    """The leader's fenced writer of row images.

    Args:
        js: the control plane's JetStream context.
        key_ttl_s: TTL of idempotency key images (seconds; ``None``: none).
        on_full: called when JetStream refuses a write because its store is full (the
            plane gives its kept room to its own writes: :mod:`lakeshore.bus.reserve`).
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        key_ttl_s: int | None = None,
        on_full: Callable[[], None] = lambda: None,
    ) -> None:
        self._js, self._on_full = js, on_full
        self._fenced = FencedLog(js, STATE_STREAM, subjects.STATE_EPOCH_SUBJECT, direct_reads=True)
        self._key_ttl_s = key_ttl_s
        self._epoch = 0

    async def begin(self, epoch: int) -> int:
        """Record ``epoch``; returns its sequence (see :meth:`FencedLog.begin`)."""
        seq = await self._fenced.begin(epoch, timeout_s=_BEGIN_TIMEOUT_S)
        self._epoch = epoch
        return seq

    async def publish(self, images: Sequence[Image]) -> int:
        """Publish ``images`` (the last of each subject), fenced, one after another.

        One at a time, not concurrently: a replicated stream refuses a fenced write while
        another fenced on the same epoch subject is still being replicated (err_code
        10164, "wrong last sequence", though no newer epoch began), so concurrent images
        of one batch would refuse each other.

        Returns:
            The highest sequence they landed at.

        Raises:
            NotLeader: a newer epoch refused them; its ``landed`` names the indices of
                ``images`` logged before the refusal.
            Unavailable: NATS did not acknowledge one (those before it landed; it may have).
        """
        latest: dict[str, Image] = {}
        indices: dict[str, list[int]] = {}
        for index, image in enumerate(images):
            subject = subject_of(image)
            latest.pop(subject, None)
            latest[subject] = image
            indices.setdefault(subject, []).append(index)
        last = 0
        landed: list[int] = []
        for subject, image in latest.items():
            try:
                last = await self._append(subject, image)
            except NotLeader as e:
                raise NotLeader(e.reason, e.leader_url, landed=frozenset(landed)) from e
            except Exception as e:  # nats-py's errors have no common base
                if NatsErrors.store_full(e):
                    self._on_full()
                    raise NatsErrors.full("write a row to the state log") from e
                raise Unavailable(f"the state log did not take a write: {e}") from e
            landed += indices[subject]
        return last

    async def holds_rows(self) -> bool:
        """Whether the stream holds any row image (beyond the epoch record)."""
        info = await self._js.stream_info(STATE_STREAM)
        return info.state.messages > 1

    async def _append(self, subject: str, image: Image) -> int:
        # Which term wrote it: the fence keeps older terms out, the header shows it did.
        headers = {EPOCH_HEADER: str(self._epoch)}
        if image.kind == "idem" and self._key_ttl_s is not None:
            headers["Nats-TTL"] = str(self._key_ttl_s)
        return await self._fenced.append(subject, encode(image), headers)


async def last_sequence(js: JetStreamContext) -> int:
    """The stream's last sequence (0 when it is empty)."""
    info = await js.stream_info(STATE_STREAM)
    return info.state.last_seq


class StateTail:
    """Reads ``LS_STATE`` in order through an ephemeral pull consumer of its own.

    A consumer that vanished (a NATS node lost, the stream recreated) is made again from
    the sequence after the last one read: nothing is skipped, nothing read twice.
    """

    def __init__(self, nc: NatsClient) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=_TAIL_API_TIMEOUT_S)
        self._deleting: set[asyncio.Task[None]] = set()
        self._sub: Any = None
        self._name = ""

    async def read(self, after: int, timeout_s: float = 1.0) -> list[tuple[int, bytes]]:
        """The next messages after sequence ``after``: ``(seq, data)`` in order, ``[]``
        when none came within ``timeout_s``. Epoch records come as empty data; gaps in
        the sequences are messages a later image of the same row replaced.

        ``after`` opens the tail; later calls go on from where it is (reopen with
        :meth:`close` to start elsewhere).
        """
        if self._sub is None:
            await self._open(after)
        try:
            msgs = await self._sub.fetch(_BATCH, timeout=timeout_s, heartbeat=timeout_s / 4)
        except jse.FetchTimeoutError:
            return []
        except (nats.errors.Error, TimeoutError, jse.APIError) as e:
            # No heartbeat either: the consumer is gone (or the connection); open anew.
            log.info("state tail: reopening after %s", type(e).__name__)
            await self.close()
            return []
        out = []
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            if seq > after:
                out.append((seq, b"" if msg.subject == subjects.STATE_EPOCH_SUBJECT else msg.data))
        return out

    async def read_stored(self, after: int, timeout_s: float = 1.0) -> list[tuple[int, bytes]]:
        """The messages after sequence ``after`` that the stream holds now (up to a batch),
        as :meth:`read` gives them, ``[]`` when there are none.

        One batch direct get: answered by any replica that holds them, the leader or not,
        with no consumer made through the JetStream meta leader. A replica that lags may
        answer with fewer: ask again.

        Raises:
            Unavailable: no replica answered within ``timeout_s``.
        """
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        request = {"seq": after + 1, "next_by_subj": subjects.STATE_SUBJECTS,
                   "batch": _BATCH, "max_bytes": _BATCH_BYTES}  # fmt: skip
        out: list[tuple[int, bytes]] = []
        try:
            await self._nc.publish(
                f"$JS.API.DIRECT.GET.{STATE_STREAM}", json.dumps(request).encode(), reply=inbox
            )
            while True:
                try:
                    msg = await sub.next_msg(timeout_s)
                except (nats.errors.TimeoutError, TimeoutError):
                    raise Unavailable(
                        f"no replica of {STATE_STREAM} answered a read within {timeout_s:g}s"
                    ) from None
                headers = msg.headers or {}
                status = headers.get("Status")
                if status == "204" or status == "404":  # end of the batch; nothing (more)
                    return out
                if status:
                    raise Unavailable(f"{STATE_STREAM} refused a read: {status} {msg.data!r}")
                seq = int(headers["Nats-Sequence"])
                epoch = headers.get("Nats-Subject") == subjects.STATE_EPOCH_SUBJECT
                out.append((seq, b"" if epoch else msg.data))
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def _open(self, after: int) -> None:
        self._name = f"tail-{uuid.uuid4().hex[:12]}"
        config = ConsumerConfig(
            name=self._name,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        await self._js.add_consumer(STATE_STREAM, config)
        self._sub = await self._js.pull_subscribe_bind(self._name, stream=STATE_STREAM)

    async def close(self) -> None:
        """Stop reading. The consumer is deleted in the background: that needs the
        JetStream meta leader, which may be electing (a node lost), and a takeover stops
        its tail on its way; one not deleted goes after its inactive threshold."""
        sub, name, self._sub, self._name = self._sub, self._name, None, ""
        if sub is None:
            return
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
        task = asyncio.create_task(self._delete(name), name=f"state-tail-delete-{name}")
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(nats.errors.Error, TimeoutError, jse.APIError):
            await self._js.delete_consumer(STATE_STREAM, name)
