"""Lease policy: a running claim is renewed with ``in_progress()`` every ``ack_wait / 3``.

Three renewals per ``ack_wait`` let two in a row be lost (a reconnect, a slow server)
before JetStream gives the message to another daemon. Renewals are timer callbacks, not a
task per claim: most runs end before the first renewal is due, and cost one timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

from lakeshore.errors import LakeshoreError

log = logging.getLogger(__name__)


class Lease:
    """``async with Lease(renew, ack_wait_s):`` keeps a claim alive for the block's duration.

    Args:
        renew: sends one ``in_progress()`` for the claim.
        ack_wait_s: the consumer's ack_wait (seconds); renewals come every third of it.
        label: names the claim in log lines (invocation id and attempt).
    """

    def __init__(
        self, renew: Callable[[], Awaitable[None]], ack_wait_s: float, label: str = ""
    ) -> None:
        self._renew = renew
        self._every_s = ack_wait_s / 3
        self._label = label
        self._timer: asyncio.TimerHandle | None = None
        self._renewing: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lease:
        self._arm()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)

    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._every_s, self._due)

    def _due(self) -> None:
        self._renewing = asyncio.create_task(self._renew_once(), name=f"lease {self._label}")

    async def _renew_once(self) -> None:
        try:
            await self._renew()
        except LakeshoreError as e:
            # The next renewal may still make it within ack_wait.
            log.warning("lease of %s not renewed: %s", self._label, e)
        if self._timer is not None:  # still held: the next renewal
            self._arm()
