"""Runs' live output on JetStream: the ``LS_LOGS`` stream, its message shape, and reading
one attempt's log back (the control plane's side).

A daemon publishes each chunk of a run's output on ``ls.<ns>.log.<invocation-id>.<attempt>``
(one subject per attempt). The body is the output's bytes as the run wrote them (so
``nats stream view`` shows them as they are); the headers carry the rest:

- ``Ls-Log-Seq``: 1, 2, … per attempt, without gaps (a retried publish keeps its number,
  and ``Nats-Msg-Id`` makes JetStream drop its copy);
- ``Ls-Log-Stream``: ``out`` or ``err``;
- ``Ls-Log-Time``: when the daemon read the chunk's first byte (Unix seconds);
- ``Ls-Log-End``: ``1`` on the attempt's last message (empty body): its log is complete.

The stream keeps messages ``log_retention_days`` (limits retention, file storage); nobody
rolls up, purges or deletes single messages in it (:data:`~lakeshore.bus.events.TENANT_WRITTEN`).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import errors as jse
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)

from lakeshore.bus import subjects
from lakeshore.bus.events import TENANT_WRITTEN
from lakeshore.bus.streams import ensure_stream
from lakeshore.errors import Unavailable

log = logging.getLogger(__name__)

SEQ_HEADER = "Ls-Log-Seq"
STREAM_HEADER = "Ls-Log-Stream"
TIME_HEADER = "Ls-Log-Time"
END_HEADER = "Ls-Log-End"
MSG_ID_HEADER = "Nats-Msg-Id"
#: Logs are kept this long by default (seconds): ``log_retention_days`` = 7.
LOGS_MAX_AGE_S = 7 * 24 * 3600.0
#: A retried publish inside this window is stored once (seconds).
LOGS_DUPLICATE_WINDOW_S = 120.0
#: Messages asked for at once while catching up with a stored log.
READ_BATCH = 256
#: A reader's consumer the server forgets once unused this long (a reader that vanished).
READER_IDLE_S = 60.0
_NATS_ERRORS = (nats.errors.Error, jse.Error, TimeoutError, OSError)


async def ensure_logs_stream(
    js: JetStreamContext, *, max_age_s: float = LOGS_MAX_AGE_S, replicas: int = 1
) -> StreamInfo:
    """Create or update ``LS_LOGS`` (idempotent; the control plane calls it on start).

    Args:
        max_age_s: how long a chunk is kept (``log_retention_days``), in seconds.
        replicas: JetStream replicas of the stream.
    """
    cfg = StreamConfig(
        name=subjects.LOGS_STREAM,
        subjects=[subjects.LOGS_SUBJECTS],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=max_age_s,
        duplicate_window=LOGS_DUPLICATE_WINDOW_S,
        num_replicas=replicas,
        **TENANT_WRITTEN,
    )
    return await ensure_stream(js, cfg)


def chunk_headers(msg_id: str, seq: int, stream: str, at: float) -> dict[str, str]:
    """The headers of one chunk (see the module)."""
    return {
        MSG_ID_HEADER: msg_id,
        SEQ_HEADER: str(seq),
        STREAM_HEADER: stream,
        TIME_HEADER: f"{at:.6f}",
    }


def end_headers(msg_id: str, seq: int, at: float) -> dict[str, str]:
    """The headers of an attempt's last message."""
    return {**chunk_headers(msg_id, seq, "out", at), END_HEADER: "1"}


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One stored message of an attempt's log."""

    seq: int
    stream: str
    time: datetime
    data: bytes
    #: the attempt's last message: nothing follows it
    end: bool = False


def _record(msg: Msg) -> LogRecord | None:
    """The record a message is; ``None`` for one that is not a log chunk (skipped)."""
    h = msg.headers or {}
    try:
        seq, at = int(h[SEQ_HEADER]), float(h[TIME_HEADER])
    except (KeyError, ValueError):
        return None
    stream = "err" if h.get(STREAM_HEADER) == "err" else "out"
    when = datetime.fromtimestamp(at, UTC)
    return LogRecord(seq, stream, when, msg.data, h.get(END_HEADER) == "1")


class LogTail:
    """One attempt's log, read through an ephemeral consumer of its own: what is stored,
    then what comes. Open it with :meth:`open`, close it with :meth:`close`.

    Args:
        js: the control plane's JetStream context.
        namespace, invocation_id, attempt: whose log.
    """

    def __init__(self, js: JetStreamContext, namespace: str, invocation_id: str, attempt: int):
        self._js = js
        self.subject = subjects.log_subject(namespace, invocation_id, attempt)
        self._name = f"log-{uuid.uuid4().hex}"
        self._sub: JetStreamContext.PullSubscription | None = None
        #: every message stored when it opened was read (a follow then waits for new ones)
        self.caught_up = False

    async def open(self) -> None:
        """Start reading from the attempt's first stored message.

        Raises:
            Unavailable: NATS did not answer.
        """
        config = ConsumerConfig(
            name=self._name,
            filter_subject=self.subject,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=READER_IDLE_S,
            mem_storage=True,
            num_replicas=1,
        )
        try:
            try:
                await self._js.get_last_msg(subjects.LOGS_STREAM, self.subject)
            except jse.NotFoundError:
                self.caught_up = True  # nothing stored yet
            await self._js.add_consumer(subjects.LOGS_STREAM, config)
            self._sub = await self._js.pull_subscribe_bind(
                name=self._name, stream=subjects.LOGS_STREAM
            )
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot read the log {self.subject}: {e!r}") from e

    async def read(self, timeout_s: float) -> list[LogRecord]:
        """The next records in order, waiting up to ``timeout_s`` for one; ``[]`` when none
        came (then :attr:`caught_up` is true).

        Raises:
            Unavailable: NATS failed otherwise.
        """
        assert self._sub is not None, "open() first"
        try:
            # As the events feed: wait for one message, then take the backlog behind it.
            msgs = await self._sub.fetch(1, timeout=timeout_s)
            behind = min(READ_BATCH, msgs[-1].metadata.num_pending or 0) if msgs else 0
            if behind:
                msgs += await self._sub.fetch(behind, timeout=timeout_s)
        except TimeoutError:
            self.caught_up = True
            return []
        except _NATS_ERRORS as e:
            raise Unavailable(f"cannot read the log {self.subject}: {e!r}") from e
        if msgs and not msgs[-1].metadata.num_pending:
            self.caught_up = True
        return [r for r in map(_record, msgs) if r is not None]

    async def close(self) -> None:
        """Drop the consumer (best effort: the server forgets it once idle anyway)."""
        sub, self._sub = self._sub, None
        if sub is None:
            return
        try:
            await sub.unsubscribe()
            await self._js.delete_consumer(subjects.LOGS_STREAM, self._name)
        except _NATS_ERRORS as e:
            log.debug("log reader %s: close failed: %r", self.subject, e)


class LogTails:
    """Where the control plane reads attempts' logs, on its own connection.

    Args:
        nc: the control plane's connected client (not closed here).
    """

    def __init__(self, nc: NatsClient) -> None:
        self._js = nc.jetstream(timeout=5)

    def tail(self, namespace: str, invocation_id: str, attempt: int) -> LogTail:
        """A reader of one attempt's log (open it, then read it)."""
        return LogTail(self._js, namespace, invocation_id, attempt)
