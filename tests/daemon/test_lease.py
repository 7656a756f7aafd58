"""The lease policy: renewals every third of ack_wait while held, through failures, and
none once released."""

from __future__ import annotations

import asyncio

from polling import eventually

from lakeshore.daemon.policies.lease import Lease
from lakeshore.errors import Unavailable

ACK_WAIT_S = 0.3  # a renewal every 0.1 s


class Renewals:
    def __init__(self, fail_first: int = 0) -> None:
        self.count, self._fail = 0, fail_first

    async def __call__(self) -> None:
        self.count += 1
        if self.count <= self._fail:
            raise Unavailable("NATS is away")


async def test_a_held_claim_is_renewed_until_released() -> None:
    renewals = Renewals()
    async with Lease(renewals, ACK_WAIT_S, "inv attempt 1"):
        await eventually(lambda: renewals.count >= 3, timeout_s=10, what="three renewals")
    after = renewals.count
    await asyncio.sleep(3 * ACK_WAIT_S / 3 + 0.05)  # the window where one more would be due
    assert renewals.count == after


async def test_a_failed_renewal_does_not_end_the_lease(caplog) -> None:
    renewals = Renewals(fail_first=2)
    async with Lease(renewals, ACK_WAIT_S, "inv attempt 1"):
        await eventually(
            lambda: renewals.count >= 3, timeout_s=10, what="a renewal after two failures"
        )
    assert caplog.text.count("not renewed") == 2


async def test_a_short_run_is_never_renewed() -> None:
    renewals = Renewals()
    async with Lease(renewals, 60.0):
        pass
    assert renewals.count == 0
