"""The SDK's direct submit: a plain submit published straight into its queue's stream.

Experimental, behind the server's ``direct_submit`` (``GET /v1/bus`` says when it is on;
issue 26's data path, in progress). A submit that needs nothing only the control plane can
do is prepared here exactly as the plane prepares it (:mod:`lakeshore.preparation`,
against the queue's row, read over HTTP and kept :data:`ROW_TTL_S`) and published into
``LS_<ns>_<queue>`` on the producer's own connection: one JetStream round trip, the
invocation ids made here (time-ordered, as the plane's). A note then says which
sequences were stored, not waited for: the plane reads them from the stream and records
them (:mod:`lakeshore.services.stored`).

Everything else goes to the gateway, as before (:meth:`Direct.takes` says which): a batch
of more than :data:`MAX_DIRECT` invocations, a submit with an idempotency key (the plane
keeps which invocation a key made), one that may wait for room (``wait_s``), and any to a
queue whose ``on_full`` is not ``reject`` (the plane evicts for ``drop_oldest``). A
refusal reads as the HTTP API's: a queue unknown, draining or archived by its row
(``QueueNotFound``, ``WrongState``), the stream full (10077) as the plane's ``QueueFull``.
A row read before its queue stopped admitting finds no stream taking the subject (its
subjects left the stream): the row is read again, and says why.

Not held on this path yet: the ``pending_per_org`` quota, the ``no_members`` warning.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import nats.js.errors as jse

from lakeshore import preparation
from lakeshore.bus import subjects
from lakeshore.errors import LakeshoreError, QueueFull, Unavailable
from lakeshore.model import (
    CLOSED_STATES,
    InvocationSubmit,
    OnFull,
    Queue,
    StoredNote,
    SubmitAnswer,
)

if TYPE_CHECKING:
    from lakeshore.bus.producer import ProducerBus
    from lakeshore.sdk.client import Client

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
        if row.state in CLOSED_STATES:
            raise preparation.closed(row)
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
            QueueNotFound: no stream took it, and the queue is gone.
        """
        if isinstance(e, jse.NoStreamResponseError):  # it stopped admitting since it was read
            self._rows.pop((row.namespace, row.name), None)
            row = await self._row(row.namespace, row.name)
            if row.state in CLOSED_STATES:
                return preparation.closed(row)
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
        """The queue's row, read again once :data:`ROW_TTL_S` old.

        Raises:
            QueueNotFound: there is no such queue.
        """
        now = time.monotonic()
        cached = self._rows.get((ns, queue))
        if cached is not None and now - cached[0] < ROW_TTL_S:
            return cached[1]
        row = await self._client.queue_show(queue, namespace=ns)
        self._rows[(ns, queue)] = (now, row)
        return row
