"""The lease policy: renewals every third of ack_wait while held, through failures, and
none once released; one keeper renews claims of different ack_waits, each on its own
cadence, from its one timer."""

from __future__ import annotations

import asyncio

from polling import eventually

from lakeshore.daemon.policies.lease import Leases
from lakeshore.errors import Unavailable

ACK_WAIT_S = 0.3  # a renewal every 0.1 s


class Renewals:
    def __init__(self, fail_first: int = 0) -> None:
        self.count, self._fail = 0, fail_first
        self.at: list[float] = []

    async def __call__(self) -> None:
        self.count += 1
        self.at.append(asyncio.get_running_loop().time())
        if self.count <= self._fail:
            raise Unavailable("NATS is away")


async def test_a_held_claim_is_renewed_until_released() -> None:
    renewals = Renewals()
    leases = Leases()
    async with leases.hold(renewals, ACK_WAIT_S, "inv attempt 1"):
        await eventually(lambda: renewals.count >= 3, timeout_s=10, what="three renewals")
    after = renewals.count
    assert len(leases) == 0
    await asyncio.sleep(3 * ACK_WAIT_S / 3 + 0.05)  # the window where one more would be due
    assert renewals.count == after


async def test_a_failed_renewal_does_not_end_the_lease(caplog) -> None:
    renewals = Renewals(fail_first=2)
    async with Leases().hold(renewals, ACK_WAIT_S, "inv attempt 1"):
        await eventually(
            lambda: renewals.count >= 3, timeout_s=10, what="a renewal after two failures"
        )
    assert caplog.text.count("not renewed") == 2


async def test_a_short_run_is_never_renewed() -> None:
    renewals = Renewals()
    async with Leases().hold(renewals, 60.0):
        pass
    assert renewals.count == 0


async def test_one_keeper_renews_each_claim_within_its_own_third() -> None:
    # A claim of a long ack_wait held first sets a slow tick; a short one taken after
    # must still be renewed within a third of its ack_wait, and the long one not at all.
    leases = Leases()
    slow, fast = Renewals(), Renewals()
    loop = asyncio.get_running_loop()
    async with leases.hold(slow, 60.0, "slow"):
        taken = loop.time()
        async with leases.hold(fast, ACK_WAIT_S, "fast"):
            await eventually(lambda: fast.count >= 4, timeout_s=10, what="four renewals")
        gaps = [b - a for a, b in zip([taken, *fast.at], fast.at, strict=False)]
        # Due every 0.1 s, sent no later (a loaded machine's event loop may be late).
        assert all(0.06 <= g for g in gaps), gaps
        assert sum(gaps) / len(gaps) <= ACK_WAIT_S / 3 + 0.05, gaps
        assert slow.count == 0
        assert len(leases) == 1
