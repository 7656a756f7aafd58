"""Lease policy: a running claim is renewed with ``in_progress()`` every ``ack_wait / 3``.

Three renewals per ``ack_wait`` let two in a row be lost (a reconnect, a slow server)
before JetStream gives the message to another daemon. One keeper (:class:`Leases`) per
daemon renews every claim it holds from one timer that ticks while it holds any: most runs
end before their first renewal is due, and a timer of their own (armed, then cancelled)
cost more than the rest of their lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

from lakeshore.errors import LakeshoreError

log = logging.getLogger(__name__)

#: Longest pause between two looks at the held claims (seconds); shorter for a claim whose
#: renewals come more often than four times this.
TICK_S = 1.0


class Leases:
    """The daemon's held claims and the one timer that renews them.

    A claim is renewed at most its :attr:`Lease.slack_s` (a quarter of a third of its
    ``ack_wait``, and at most :data:`TICK_S`) before a third of its ``ack_wait`` has passed
    since it was taken or last renewed.
    """

    def __init__(self) -> None:
        self._held: dict[Lease, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._tick_s = TICK_S

    def __len__(self) -> int:
        return len(self._held)

    def hold(
        self, renew: Callable[[], Awaitable[None]], ack_wait_s: float, label: str = ""
    ) -> Lease:
        """``async with leases.hold(renew, ack_wait_s):`` keeps a claim alive for the
        block's duration.

        Args:
            renew: sends one ``in_progress()`` for the claim.
            ack_wait_s: the consumer's ack_wait (seconds); renewals come every third of it.
            label: names the claim in log lines (invocation id and attempt).
        """
        return Lease(self, renew, ack_wait_s, label)

    def _add(self, lease: Lease) -> None:
        self._held[lease] = None
        if self._timer is not None and lease.slack_s < self._tick_s:
            self._timer.cancel()  # it ticks too seldom for this claim
            self._timer = None
        if self._timer is None:
            self._arm(lease.slack_s)

    def _remove(self, lease: Lease) -> None:
        self._held.pop(lease, None)

    def _arm(self, tick_s: float) -> None:
        self._tick_s = tick_s
        self._timer = asyncio.get_running_loop().call_later(tick_s, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if not self._held:
            return  # the next claim arms it again
        now = asyncio.get_running_loop().time()
        tick_s = TICK_S
        for lease in list(self._held):
            # The timer ticks at least once per slack of each held claim (``_add``).
            tick_s = min(tick_s, lease.slack_s)
            if lease.renewed_at + lease.every_s - lease.slack_s <= now:
                lease.renew(now)
        self._arm(tick_s)


class Lease:
    """One held claim (:meth:`Leases.hold`)."""

    __slots__ = ("_keeper", "_renew", "every_s", "slack_s", "_label", "renewed_at", "_renewing")

    def __init__(
        self,
        keeper: Leases,
        renew: Callable[[], Awaitable[None]],
        ack_wait_s: float,
        label: str = "",
    ) -> None:
        self._keeper = keeper
        self._renew = renew
        self.every_s = ack_wait_s / 3
        #: how long before it is due a renewal is sent, at most (the keeper's tick is no
        #: longer than this while the claim is held)
        self.slack_s = min(TICK_S, self.every_s / 4)
        self._label = label
        #: loop time of the claim's take or its last renewal sent
        self.renewed_at = 0.0
        self._renewing: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lease:
        self.renewed_at = asyncio.get_running_loop().time()
        self._keeper._add(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._keeper._remove(self)
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)

    def renew(self, now: float) -> None:
        """Send a renewal (unless the last one is still on its way)."""
        if self._renewing is not None and not self._renewing.done():
            return
        self.renewed_at = now
        self._renewing = asyncio.create_task(self._renew_once(), name=f"lease {self._label}")

    async def _renew_once(self) -> None:
        try:
            await self._renew()
        except LakeshoreError as e:
            # The next renewal may still make it within ack_wait.
            log.warning("lease of %s not renewed: %s", self._label, e)
