"""The leader's fenced writer: every write is checked by the server against its epoch.

A new leader first records its epoch on the stream's epoch subject (a compare-and-set on
that subject's last sequence). Every later write carries
``Nats-Expected-Last-Subject-Sequence: <that record's sequence>`` with
``Nats-Expected-Last-Subject-Sequence-Subject: <epoch subject>`` (server ≥ 2.11), so once a
newer leader records its epoch, the server refuses every write of the old one, even one
that was paused or partitioned past its lease (notes/control-plane-ha.md §2, "Cross-subject
fence"). A refusal raises :class:`~lakeshore.errors.NotLeader`: the caller steps down.
"""

from __future__ import annotations

from typing import Any

import msgspec
from nats.js import errors as jse

from lakeshore.bus.lease import is_wrong_last_sequence
from lakeshore.errors import NotLeader

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"


class EpochRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a leader writes on the epoch subject when it begins."""

    epoch: int
    """The leader's epoch (from its lease): strictly greater than every earlier record's."""


_decode = msgspec.json.Decoder(EpochRecord).decode


class FencedLog:
    """Writes of one leader into one stream, fenced by its epoch record.

    Args:
        js: a nats-py ``JetStreamContext``.
        stream: the stream written to; it must hold ``epoch_subject`` too.
        epoch_subject: the subject of the stream's epoch records.
        direct_reads: read the last record from any replica (the stream allows direct
            gets), so a takeover need not wait for the stream to elect a leader to read
            it; a stale read only makes the compare-and-set of :meth:`begin` fail.
    """

    def __init__(
        self, js: Any, stream: str, epoch_subject: str, *, direct_reads: bool = False
    ) -> None:
        self._js, self.stream, self.epoch_subject = js, stream, epoch_subject
        self._direct = direct_reads
        self._fence: int | None = None

    @property
    def fence(self) -> int | None:
        """The stream sequence of this writer's epoch record; ``None`` before
        :meth:`begin` and after a refusal."""
        return self._fence

    async def begin(self, epoch: int, timeout_s: float | None = None) -> int:
        """Record ``epoch`` as the stream's current one; from then on the server refuses
        the writes of every earlier epoch. Asking again after a timeout is safe: a record
        of this very epoch found is this writer's own (whose acknowledgement was lost), and
        is taken as it is.

        Args:
            timeout_s: how long the record's publish may wait (default: the context's);
                a takeover asks again soon rather than wait out a stream's election.

        Returns:
            The record's stream sequence. Everything an earlier leader wrote lies below
            it, so a projection that applied up to it has applied all of them.

        Raises:
            NotLeader: a higher epoch is recorded already, or another leader recorded one
                between the read and the write.
        """
        self._fence = None
        try:
            last = await self._js.get_last_msg(self.stream, self.epoch_subject, direct=self._direct)
        except jse.NotFoundError:
            seen_seq, seen_epoch = 0, 0
        else:
            seen_seq, seen_epoch = last.seq, _decode(last.data).epoch
        if seen_epoch == epoch:  # ours: only the lease's holder of this epoch writes it
            self._fence = seen_seq
            return seen_seq
        if seen_epoch > epoch:
            raise NotLeader(
                f"epoch {seen_epoch} already began on {self.stream}, ours is {epoch} (if the "
                f"lease bucket was deleted, its epochs began again: see docs/ha.md)"
            )
        try:
            ack = await self._js.publish(
                self.epoch_subject,
                msgspec.json.encode(EpochRecord(epoch=epoch)),
                stream=self.stream,
                headers={_EXPECTED_LAST_SUBJECT_SEQ: str(seen_seq)},
                timeout=timeout_s,
            )
        except jse.APIError as e:
            if is_wrong_last_sequence(e):
                raise NotLeader(f"another epoch began on {self.stream} meanwhile") from e
            raise
        self._fence = ack.seq
        return ack.seq

    async def append(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None
    ) -> int:
        """Publish ``payload`` on ``subject``, accepted only while this epoch is current.

        Returns:
            The message's stream sequence.

        Raises:
            NotLeader: no epoch was begun, or a newer leader's epoch record refused the
                write (nothing was stored); the writer then stays refused.
        """
        if self._fence is None:
            raise NotLeader(f"no epoch begun on {self.stream}")
        fenced = dict(headers or {})
        fenced[_EXPECTED_LAST_SUBJECT_SEQ] = str(self._fence)
        fenced[_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = self.epoch_subject
        try:
            ack = await self._js.publish(subject, payload, stream=self.stream, headers=fenced)
        except jse.APIError as e:
            if is_wrong_last_sequence(e):
                self._fence = None
                raise NotLeader(f"a newer epoch began on {self.stream}") from e
            raise
        return ack.seq
