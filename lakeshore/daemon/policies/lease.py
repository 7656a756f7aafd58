"""Lease policy: a running claim is renewed with ``in_progress()`` every ``ack_wait / 3``.

Three renewals per ``ack_wait`` let two in a row be lost (a reconnect, a slow server)
before JetStream gives the message to another daemon.
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
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lease:
        self._task = asyncio.create_task(self._keep(), name=f"lease {self._label}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            try:
                await self._renew()
            except LakeshoreError as e:
                # The next renewal may still make it within ack_wait.
                log.warning("lease of %s not renewed: %s", self._label, e)
