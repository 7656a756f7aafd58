"""Leader election of the control planes through a JetStream KV lease.

One key (:data:`~lakeshore.bus.subjects.LEASE_KEY`) in a bucket with history 1 and
per-message TTL. A candidate creates it if absent with a TTL; the holder renews it with a
compare-and-set publish that carries the TTL again. The lease gives liveness only: safety
comes from the epoch fence of :mod:`lakeshore.bus.fenced`, checked by the server.

Two nats-py 2.16 traps (notes/control-plane-ha.md §2) are avoided here:

* ``kv.update()`` cannot carry a TTL, and a key updated with it never expires: renewals
  are raw publishes with ``Nats-Expected-Last-Subject-Sequence`` and ``Nats-TTL``.
* with KV limit markers, ``kv.get()`` and ``kv.create()`` take an expired key for a live
  one for another ``limit_marker_ttl``: the bucket is created without markers.

The epoch of a holder is the stream sequence its lease was created at. It is written into
the lease's own value, so the create also expects the stream's last sequence: the value
can then name the sequence it lands at, and sequences of one stream only grow, so epochs
strictly increase across holders (as long as the bucket is not deleted).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, NewType

import msgspec
import nats.errors
from nats.js import api
from nats.js import errors as jse

from lakeshore.bus import subjects
from lakeshore.bus.reserve import store_full
from lakeshore.errors import NotLeader

log = logging.getLogger(__name__)

#: A leader's fencing token: strictly greater than every earlier holder's.
Epoch = NewType("Epoch", int)

_EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_KV_OP = "KV-Operation"
_KV_DEL = "DEL"
_KV_PURGE = "PURGE"
#: The server's "wrong last sequence" refusal of an expected-sequence check.
WRONG_LAST_SEQUENCE = 10071
#: A candidate that loses a race re-reads and tries again this often before giving up.
_CREATE_ATTEMPTS = 5


class Holder(msgspec.Struct, frozen=True, kw_only=True):
    """The lease's value: who leads and where its API answers."""

    holder_id: str
    """The control plane's id."""
    url: str
    """Its HTTP API's base URL, for standbys to redirect clients to."""
    epoch: int
    """The stream sequence the lease was created at (see the module docstring)."""


_decode = msgspec.json.Decoder(Holder).decode


async def ensure_bucket(js: Any, bucket: str = subjects.LEASE_BUCKET, replicas: int = 1) -> None:
    """Create the lease bucket if missing: history 1, per-message TTL, no limit markers.

    Args:
        js: a nats-py ``JetStreamContext``.
        bucket: the bucket's name.
        replicas: 3 in production (one per NATS node of the cluster).
    """
    # nats-py always sends allow_msg_ttl; limit_marker_ttl=None keeps markers off (the
    # trap above), and no bucket-wide ttl so only the per-message TTL expires the lease.
    await js.create_key_value(
        api.KeyValueConfig(bucket=bucket, history=1, replicas=replicas, limit_marker_ttl=None)
    )


def is_wrong_last_sequence(error: Exception) -> bool:
    """Whether ``error`` is the server refusing an expected-sequence check."""
    return isinstance(error, jse.APIError) and error.err_code == WRONG_LAST_SEQUENCE


class Lease:
    """One control plane's handle on the leader lease.

    Args:
        js: a nats-py ``JetStreamContext`` of the control plane's connection.
        holder_id: this control plane's id.
        url: its API's base URL.
        ttl_s: the lease's time to live, whole seconds ≥ 1 (the server's minimum; nats-py
            sends whole seconds). A holder that stops renewing loses it after this long.
        bucket: the lease bucket (made by :func:`ensure_bucket`, and again by
            :meth:`acquire` if it was deleted).
        replicas: the bucket's replicas, should it be made again.
        on_full: called when JetStream refuses a write of the lease because its store is
            full (the plane gives its kept room to its own writes, the lease's renewals
            among them: :mod:`lakeshore.bus.reserve`).
    """

    def __init__(
        self,
        js: Any,
        holder_id: str,
        url: str,
        ttl_s: int,
        *,
        bucket: str = subjects.LEASE_BUCKET,
        replicas: int = 1,
        on_full: Callable[[], None] = lambda: None,
    ) -> None:
        if ttl_s < 1 or int(ttl_s) != ttl_s:
            raise ValueError(f"lease ttl_s must be whole seconds >= 1, got {ttl_s!r}")
        self._js = js
        self.holder_id, self.url, self.ttl_s = holder_id, url, int(ttl_s)
        self._bucket, self._replicas, self._on_full = bucket, replicas, on_full
        self._stream = subjects.lease_stream(bucket)
        self._subject = subjects.lease_subject(bucket)
        self._revision: int | None = None
        self._value = b""

    @property
    def epoch(self) -> Epoch | None:
        """The epoch of the lease this handle holds, ``None`` when it holds none."""
        return None if self._revision is None else Epoch(_decode(self._value).epoch)

    async def acquire(self) -> Epoch | None:
        """Take the lease if nobody holds it.

        Returns:
            The new epoch, or ``None`` when another control plane holds the lease (this
            one included, through an earlier handle). A handle that holds the lease
            already gets its epoch back.
        """
        if self._revision is not None:
            return self.epoch
        for _ in range(_CREATE_ATTEMPTS):
            last = await self._last()
            if last is not None and not _is_tombstone(last) and not self._was_mine(last):
                return None
            subject_seq = 0 if last is None else last.seq
            try:
                info = await self._js.stream_info(self._stream)
            except jse.NotFoundError:
                # The bucket was deleted (by hand): make it again, then campaign.
                log.warning("lease bucket %s is missing: creating it", self._bucket)
                await ensure_bucket(self._js, self._bucket, self._replicas)
                continue
            epoch = info.state.last_seq + 1
            value = msgspec.json.encode(Holder(holder_id=self.holder_id, url=self.url, epoch=epoch))
            headers = {
                _EXPECTED_LAST_SUBJECT_SEQ: str(subject_seq),
                # The value names the sequence it lands at: refused if anything else
                # landed in the bucket since the read.
                _EXPECTED_LAST_SEQ: str(epoch - 1),
            }
            try:
                ack = await self._js.publish(
                    self._subject, value, headers=headers, msg_ttl=self.ttl_s
                )
            except jse.APIError as e:
                if is_wrong_last_sequence(e):
                    continue
                if store_full(e):
                    self._on_full()
                raise
            self._revision, self._value = ack.seq, value
            return Epoch(epoch)
        return None

    @property
    def revision(self) -> int | None:
        """The stream sequence of this holder's last write of the lease (``None``: not
        held); a renewal moves it on."""
        return self._revision

    async def renew(self) -> None:
        """Extend the lease by ``ttl_s`` from now.

        Raises:
            NotLeader: the lease is not held, or the server refused the renewal (it
                expired and another took it, or it was overwritten); the handle then
                holds nothing and the caller must step down.
        """
        if self._revision is None:
            raise NotLeader("the lease is not held")
        try:
            # Not kv.update(): it sends no TTL, and a lease renewed by it never expires.
            ack = await self._js.publish(
                self._subject,
                self._value,
                headers={_EXPECTED_LAST_SUBJECT_SEQ: str(self._revision)},
                msg_ttl=self.ttl_s,
            )
        except jse.APIError as e:
            if is_wrong_last_sequence(e):
                self.forget()
                raise NotLeader("the lease was lost (expired or taken)") from e
            if store_full(e):
                self._on_full()  # the next renewal goes into the room it frees
            raise
        self._revision = ack.seq

    def _was_mine(self, last: Any) -> bool:
        """Whether the live lease is one an earlier run of this control plane took (same
        id: the same data dir, which one process at a time can hold), so this run may
        take it over at once instead of waiting out its TTL."""
        try:
            return bool(last.data) and _decode(last.data).holder_id == self.holder_id
        except msgspec.DecodeError:
            return False

    def advertise(self, url: str) -> None:
        """Name ``url`` as this control plane's API from the next renewal on."""
        self.url = url
        if self._revision is not None:
            holder = _decode(self._value)
            self._value = msgspec.json.encode(
                Holder(holder_id=holder.holder_id, url=url, epoch=holder.epoch)
            )

    async def leader(self) -> Holder | None:
        """Who holds the lease now (as stored), ``None`` when nobody does."""
        last = await self._last()
        if last is None or _is_tombstone(last) or not last.data:
            return None
        return _decode(last.data)

    async def resign(self) -> None:
        """Give the lease up now, so a standby need not wait for its TTL; a lease already
        lost is left alone."""
        if self._revision is None:
            return
        revision = self._revision
        self.forget()
        try:
            # Expecting our revision, so only our own lease is deleted.
            await self._js.publish(
                self._subject,
                b"",
                headers={_KV_OP: _KV_DEL, _EXPECTED_LAST_SUBJECT_SEQ: str(revision)},
            )
        except jse.APIError as e:
            if not is_wrong_last_sequence(e):
                raise

    def forget(self) -> None:
        """Stop holding the lease locally (it lapses on the server at its TTL)."""
        self._revision, self._value = None, b""

    async def _last(self) -> Any:
        try:
            return await self._js.get_last_msg(self._stream, self._subject)
        except jse.NotFoundError:
            return None


def _is_tombstone(msg: Any) -> bool:
    return bool(msg.headers) and msg.headers.get(_KV_OP) in (_KV_DEL, _KV_PURGE)


class Elector:
    """Campaigns for the lease, renews it every ``ttl_s / 3`` while held, and says so.

    ``on_elected(epoch)`` runs when the lease is taken; ``on_deposed(reason)`` when it is
    lost: a renewal was refused, or none succeeded for ``ttl_s - 0.5`` seconds (the renew
    deadline, on the monotonic clock: by then a standby may be about to take over), or the
    elector closed while leading. After a deposition it campaigns again. The loop runs in
    a TaskGroup the elector owns; use it as ``async with Elector(...)``.

    Args:
        lease: this control plane's lease handle.
        on_elected: awaited with the new epoch.
        on_deposed: awaited with a lowercase reason.
        retry_s: how often a candidate tries to take the lease (seconds).
        attempt_s: how long one try may take (seconds): while JetStream elects the lease
            stream's leader nothing answers, and a try that waits long sees the new leader
            late. A try cut short whose create landed finds the lease its own next time.
    """

    def __init__(
        self,
        lease: Lease,
        *,
        on_elected: Callable[[Epoch], Awaitable[None]],
        on_deposed: Callable[[str], Awaitable[None]],
        retry_s: float = 0.1,
        attempt_s: float = 0.5,
    ) -> None:
        self._lease = lease
        self._on_elected, self._on_deposed = on_elected, on_deposed
        self._retry_s, self._attempt_s = retry_s, attempt_s
        self._renew_every_s = lease.ttl_s / 3
        # Half a second of margin before the lease can lapse, never less than one renewal.
        self._deadline_s = max(lease.ttl_s - 0.5, self._renew_every_s)
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Elector:
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._task = self._group.create_task(self._run(), name="lease-elector")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, timeout_s: float = 5.0) -> None:
        """Stop campaigning; a leader resigns (so a standby need not wait for the TTL) and
        hears ``on_deposed("elector closed")``. Bounded by ``timeout_s``.

        Raises:
            TimeoutError: the loop or the resignation did not end in time.
        """
        group, task = self._group, self._task
        self._group = self._task = None
        if group is None or task is None:
            return
        task.cancel()
        async with asyncio.timeout(timeout_s):
            await group.__aexit__(None, None, None)
            if self._lease.epoch is not None:
                try:
                    await self._lease.resign()
                finally:
                    await self._on_deposed("elector closed")

    async def _run(self) -> None:
        while True:
            epoch = await self._campaign()
            log.info("lease %s: elected with epoch %d", self._lease.holder_id, epoch)
            await self._on_elected(epoch)
            reason = await self._hold()
            log.warning("lease %s: deposed from epoch %d: %s", self._lease.holder_id, epoch, reason)
            await self._on_deposed(reason)

    async def _campaign(self) -> Epoch:
        failed = 0
        while True:
            try:
                async with asyncio.timeout(self._attempt_s):
                    epoch = await self._lease.acquire()
            except (nats.errors.Error, TimeoutError, OSError) as e:
                failed += 1
                if failed == 1 or failed % 20 == 0:  # said once, then every ~10 s
                    log.warning("lease %s: campaign failed (%d tries): %s",
                                self._lease.holder_id, failed, e or type(e).__name__)  # fmt: skip
                epoch = None
            if epoch is not None:
                return epoch
            await asyncio.sleep(self._retry_s)

    async def _hold(self) -> str:
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(self._renew_every_s)
            left_s = self._deadline_s - (time.monotonic() - renewed_at)
            # A loop that stalled (a loaded machine, a long collection) may wake with little
            # or no time left: the renewal is still tried, for at least one attempt's time.
            # It is a compare-and-set on the lease's revision, so it succeeds only if the
            # lease never lapsed and nobody took it: holding on after it is safe, and every
            # write of a leader is fenced by its epoch besides (bus/fenced.py).
            try:
                async with asyncio.timeout(max(left_s, self._attempt_s)):
                    await self._lease.renew()
                renewed_at = time.monotonic()
            except NotLeader as e:
                return e.reason
            except (nats.errors.Error, TimeoutError, OSError) as e:
                log.warning("lease %s: renewal failed: %s", self._lease.holder_id, e)
            if time.monotonic() - renewed_at >= self._deadline_s:
                self._lease.forget()
                return f"no renewal succeeded for {self._deadline_s:g}s"
