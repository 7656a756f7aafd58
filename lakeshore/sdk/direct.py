"""The SDK's direct submit: a plain submit published straight into its queue's stream.

Experimental, behind the server's ``direct_submit`` (``GET /v1/bus`` says when it is on;
issue 26's data path, in progress). A submit that needs nothing only the control plane can
do is prepared here exactly as the plane prepares it (:mod:`lakeshore.preparation`,
against the queue's row, read over HTTP on first use, then again in the background every
:data:`ROW_TTL_S`) and published into ``LS_<ns>_<queue>`` on the producer's own
connection: one JetStream round trip, the invocation ids made here (time-ordered, as the
plane's). A nudge then wakes the queue's daemons, and a note says what was stored, neither
waited for: the plane reads it from the stream and records it
(:mod:`lakeshore.services.stored`).

Everything else goes to the gateway, as before (:meth:`Direct.takes` says which): a batch
of more than :data:`MAX_DIRECT` invocations, a submit with an idempotency key (the plane
keeps which invocation a key made), one that may wait for room (``wait_s``), and any to a
queue whose ``on_full`` is not ``reject`` (the plane evicts for ``drop_oldest``). A
refusal reads as the HTTP API's: a queue unknown, draining or archived by its row
(``QueueNotFound``, ``WrongState``), the stream full (10077) as the plane's ``QueueFull``.
A row read before its queue stopped admitting finds no stream taking the subject (its
subjects left the stream): the row is read again, and says why. While the control plane
does not answer, the last row read is used: submits to the queues this client knows are
accepted with no control plane running (fault row 24).

Not held on this path yet: the ``pending_per_org`` quota, the ``no_members`` warning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import nats.js.errors as jse

from lakeshore import preparation
from lakeshore.bus import subjects
from lakeshore.errors import LakeshoreError, QueueFull, QueueNotFound, Unavailable
from lakeshore.model import (
    InvocationSubmit,
    OnFull,
    Queue,
    StoredNote,
    SubmitAnswer,
)

if TYPE_CHECKING:
    from lakeshore.bus.producer import ProducerBus
    from lakeshore.sdk.client import Client

log = logging.getLogger(__name__)

#: How long a queue's row read for direct submits is used before it is read again (s).
ROW_TTL_S = 5.0
#: JetStream's answer when a stream is at its ``max_msgs`` (``discard: new``).
ERR_STREAM_FULL = 10077
#: Publishes of one submit in flight at once.
WINDOW = 256
#: Largest submit published here: a larger batch (``f.map``) goes to the gateway in one
#: request, which publishes it pipelined faster than this connection's publishes one by
#: one (``bench/submit.py``: W1-map submits 15,397/s through the gateway, 7,017/s direct).
MAX_DIRECT = 16


class Direct:
    """Direct submits of one client, over its producer connection."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._rows: dict[tuple[str, str], tuple[float, Queue]] = {}
        self._reading: dict[tuple[str, str], asyncio.Task[None]] = {}

    @staticmethod
    def takes(invocations: list[InvocationSubmit], wait_s: float | None) -> bool:
        """Whether the submit may go straight to the stream (before its queue's row is
        known: the row may still send it to the gateway)."""
        return (
            wait_s is None
            and len(invocations) <= MAX_DIRECT
            and all(inv.idempotency_key is None for inv in invocations)
        )

    async def submit(
        self, bus: ProducerBus, ns: str, queue: str, invocations: list[InvocationSubmit]
    ) -> SubmitAnswer | None:
        """Store ``invocations`` in the queue's stream; ``None``: the gateway's to do.

        Raises:
            Invalid, TooLarge: as the plane refuses a malformed invocation.
            QueueFull: the queue is at its ``max_depth`` (the first ones may be stored:
                the message says how many).
            QueueNotFound, WrongState: no such queue, or it admits nothing now.
            Unavailable: NATS did not answer.
        """
        row = await self._row(ns, queue)
        if row.on_full is not OnFull.REJECT:
            return None
        preparation.check_admitting(row)
        ids = await preparation.new_ids(len(invocations))
        items = await preparation.prepare(row, invocations, ids)
        seqs: list[int] = []
        stored: list[str] = []
        try:
            for start in range(0, len(items), WINDOW):
                window = items[start : start + WINDOW]
                timeout_s = self._client.timeout_s
                acks = await asyncio.gather(
                    *(
                        bus.publish_work(
                            subjects.level_subject(ns, queue, p.level),
                            p.payload,
                            p.msg_id,
                            timeout_s,
                        )
                        for p in window
                    ),
                    return_exceptions=True,
                )
                refused: tuple[int, BaseException] | None = None
                for offset, ack in enumerate(acks):
                    if not isinstance(ack, BaseException):
                        seqs.append(ack.seq)  # each one stored is noted, refused or not
                        stored.append(window[offset].id)
                    elif refused is None:
                        refused = (start + offset, ack)
                if refused is not None:
                    index, e = refused
                    raise await self._refusal(row, e, index, len(items)) from e
        finally:
            if seqs:
                await bus.note_stored(ns, queue, StoredNote(seqs=seqs, ids=stored))
        return SubmitAnswer(ids=ids, queue=queue, namespace=ns)

    async def _refusal(self, row: Queue, e: BaseException, index: int, total: int) -> BaseException:
        """What the ``index``-th of ``total`` publishes' failure ``e`` reads as.

        Raises:
            QueueNotFound, WrongState: no stream took it, and the queue is gone or no
                longer admits.
        """
        if isinstance(e, jse.NoStreamResponseError):  # it stopped admitting since it was read
            row = await self._read_row(row.namespace, row.name)
            preparation.check_admitting(row)
            return Unavailable(f"no stream of {row.namespace}/{row.name} took a submit: {e!r}")
        if isinstance(e, jse.APIError) and e.err_code == ERR_STREAM_FULL:
            try:
                preparation.full(row, index, total)
            except QueueFull as full:
                return full
        if isinstance(e, LakeshoreError):
            return e
        return Unavailable(f"the stream of {row.namespace}/{row.name} refused a submit: {e!r}")

    async def _row(self, ns: str, queue: str) -> Queue:
        """The queue's row: read on first use, then the one read last, read again in the
        background once :data:`ROW_TTL_S` old (no submit waits for it). While the control
        plane does not answer, the last one read goes on being used: the stream holds what
        matters of it by itself (its subjects while the queue admits, its ``max_depth``),
        so submits to the queues this client knows go on with no control plane running.

        Raises:
            QueueNotFound: there is no such queue.
            Unavailable: the plane does not answer, and this queue was never read.
        """
        key = (ns, queue)
        cached = self._rows.get(key)
        if cached is None:
            return await self._read_row(ns, queue)
        if time.monotonic() - cached[0] >= ROW_TTL_S and key not in self._reading:
            task = asyncio.create_task(self._read_again(ns, queue))
            self._reading[key] = task
            task.add_done_callback(lambda _: self._reading.pop(key, None))
        return cached[1]

    async def close(self) -> None:
        """Stop reading rows in the background."""
        tasks = list(self._reading.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_row(self, ns: str, queue: str) -> Queue:
        read_at = time.monotonic()
        row = await self._client.queue_show(queue, namespace=ns)
        self._rows[(ns, queue)] = (read_at, row)
        return row

    async def _read_again(self, ns: str, queue: str) -> None:
        try:
            await self._read_row(ns, queue)
        except QueueNotFound:
            self._rows.pop((ns, queue), None)  # the next submit says so
        except LakeshoreError as e:
            log.info("queue %s/%s: its row was not read again (%s): the last one is used",
                     ns, queue, e.message)  # fmt: skip
