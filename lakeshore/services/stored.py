"""What producers stored straight into their queues' streams, recorded.

With ``direct_submit`` (the server's setting) the SDK publishes a plain submit's invocations
into its queue's stream itself — one JetStream round trip, no control plane on the way —
and then says which sequences it stored, and which invocations: a core NATS note on
:func:`~lakeshore.bus.subjects.stored_subject` (:class:`~lakeshore.model.StoredNote`), not
waited for. Its ids are known at once to a result wait (:meth:`StoredNotes.expects`: the
job is waited for rather than not found before the Recorder hears of it; a producer can
make only its own namespace's waits wait). The notes of a queue are
gathered for :data:`LINGER_S` (most of a warm queue's jobs are claimed and done by then,
and their claims carried the record: nothing left to read), then the sequences still stored
are read from the stream in one batched direct get (the stored message is the record; a
note only says where to look, so a producer cannot make the history say what its stream
does not hold), and their ``submitted`` events go to the outbox, which leaves out those a
claim recorded first (:mod:`lakeshore.actors.outbox`).

A note that is lost or never sent costs the history nothing: a claim carries its
invocation's record (:mod:`lakeshore.submission`), and a new leadership term reads every
queue's undelivered messages (:mod:`lakeshore.services.unrecorded`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

import msgspec

from lakeshore import submission
from lakeshore.actors.outbox import Outbox
from lakeshore.bus import codec
from lakeshore.bus.port import Bus
from lakeshore.errors import LakeshoreError
from lakeshore.model import Invocation, StoredNote

log = logging.getLogger(__name__)

#: Most sequences one note may name (a producer's submit of more sends several).
MAX_SEQS = 1_000
#: How long the notes of a queue are gathered before its stream is read (seconds).
LINGER_S = 0.05
#: Ids of noted invocations remembered for result waits (the newest).
EXPECTED = 100_000

_note = msgspec.json.Decoder(StoredNote)


class StoredNotes:
    """Args:
    bus: reads the messages the notes name.
    outbox: where their ``submitted`` events go.
    linger_s: how long a queue's notes are gathered before they are read (seconds).
    """

    def __init__(self, bus: Bus, outbox: Outbox, *, linger_s: float = LINGER_S) -> None:
        self._bus, self._outbox, self._linger_s = bus, outbox, linger_s
        self._noted: dict[tuple[str, str], set[int]] = {}
        self._reading: set[asyncio.Task[None]] = set()
        self._expected: OrderedDict[tuple[str, str], None] = OrderedDict()

    def expects(self, namespace: str, invocation_id: str) -> bool:
        """Whether a producer said it stored this invocation (among the newest noted)."""
        return (namespace, invocation_id) in self._expected

    async def take(self, subject: str, data: bytes) -> None:
        """One :class:`~lakeshore.model.StoredNote` on ``ls.<ns>.stored.<queue>``."""
        _, namespace, _, queue = subject.split(".")
        try:
            note = _note.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.info("a note of stored invocations on %s does not decode", subject)
            return
        seqs = note.seqs[:MAX_SEQS]
        for inv_id in note.ids[:MAX_SEQS]:
            self._expected[(namespace, inv_id)] = None
        while len(self._expected) > EXPECTED:
            self._expected.popitem(last=False)
        key = (namespace, queue)
        if key not in self._noted:
            self._noted[key] = set()
            task = asyncio.create_task(self._read_later(namespace, queue))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)
        self._noted[key].update(seqs)

    async def close(self) -> None:
        """Read what was noted now (a stop does not wait for the linger)."""
        self._linger_s = 0.0
        await asyncio.gather(*self._reading, return_exceptions=True)

    async def _read_later(self, namespace: str, queue: str) -> None:
        await asyncio.sleep(self._linger_s)
        seqs = self._noted.pop((namespace, queue), set())
        try:
            stored = await self._bus.stored_messages(namespace, queue, sorted(seqs))
        except LakeshoreError as e:  # the claims or the next term record them
            log.info("stored invocations of %s/%s not read now: %s", namespace, queue, e)
            return
        events = []
        for seq, payload in stored:
            try:
                inv = codec.decode(payload, Invocation)
            except msgspec.DecodeError:
                continue  # not an invocation: a daemon terminates it when it claims it
            if (inv.namespace, inv.queue) != (namespace, queue):
                continue  # its daemon refuses it (daemon/claimer.py); nothing to record
            if self._outbox.holds(namespace, inv.id):
                continue  # the plane's own submit: its event is on its way
            events.append(
                submission.submitted(
                    inv, seq, len(payload), inv.submitted_at, recorded_from="producer"
                )
            )
        self._outbox.put(namespace, queue, events)
