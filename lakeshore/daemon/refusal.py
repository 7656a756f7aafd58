"""When NATS's refusals of the daemon are final: its token revoked, or its credential expired.

nats-server answers ``Authorization Violation`` both when the control plane refuses a
daemon and when its auth callout is not answered in time (the control plane restarting or
electing a leader): a daemon must reconnect through the second as it always did, and stop
on the first, instead of reconnecting for ever. Refused :data:`IN_A_ROW` times with no
answered request in between, the daemon looks closer: an expired credential is final (it
is renewed only over the connection NATS refuses); else the API is asked whether the token
the daemon joined with is live — a 401 is final, anything else (no answer, a standby) is
not, and the count starts again. A daemon the control plane started acts for it, not for a
token (nothing to ask): it stops only once its credential has expired.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from lakeshore.bus.work import Refusals
from lakeshore.daemon.credential import Credential
from lakeshore.errors import Unauthorized

log = logging.getLogger(__name__)

#: Refusals in a row after which the daemon looks closer.
IN_A_ROW = 2
#: Bound of one question to the API (seconds); no answer in time counts as no answer.
CHECK_TIMEOUT_S = 10.0

#: Asks the API whether the daemon's token is live: ``True``; ``False``, the API answered
#: 401 (unknown or revoked); ``None``, no answer.
TokenCheck = Callable[[], Awaitable[bool | None]]

REVOKED = (
    "token revoked: NATS refuses this daemon and the API answers that the token it joined "
    "with is unknown or revoked; this daemon stops — start it again with a live token "
    "(`lakeshore tokens create` issues one): `LAKESHORE_TOKEN=<token> lakeshore daemon run "
    "--api URL`"
)
EXPIRED = (
    "credential expired: NATS refuses this daemon's credential, whose life ended before a "
    "heartbeat could renew it; this daemon stops — start it again to get a new one "
    "(`LAKESHORE_TOKEN=<token> lakeshore daemon run --api URL`)"
)


async def refused_for_good(
    refusals: Refusals, credential: Credential, token_live: TokenCheck | None
) -> Unauthorized:
    """Wait until NATS's refusals of this daemon are known to be final.

    Args:
        refusals: the connection's refusals.
        credential: the daemon's credential (its expiry).
        token_live: asks the API about the daemon's token; ``None``: the daemon has none of
            its own (the control plane started it).

    Returns:
        What to tell, ``token revoked: …`` or ``credential expired: …``, saying what to do.
    """
    while True:
        await refusals.wait(IN_A_ROW)
        if credential.expired():
            return Unauthorized(EXPIRED)
        if token_live is not None and await _ask(token_live) is False:
            return Unauthorized(REVOKED)
        log.info("NATS refused this daemon %d times in a row; reconnecting", refusals.in_row)
        refusals.reset()


async def _ask(token_live: TokenCheck) -> bool | None:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_S):
            return await token_live()
    except TimeoutError:
        return None


class RefusalWatch:
    """Runs :func:`refused_for_good`: once ``decided`` is set, ``final`` says why the daemon
    stops."""

    def __init__(
        self, refusals: Refusals, credential: Credential, token_live: TokenCheck | None
    ) -> None:
        self._args = (refusals, credential, token_live)
        self.final: Unauthorized | None = None
        self.decided = asyncio.Event()

    async def run(self) -> None:
        self.final = await refused_for_good(*self._args)
        self.decided.set()
