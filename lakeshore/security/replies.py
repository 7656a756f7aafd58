"""Requests whose reply subject lies outside the asker's own inbox: dropped, counted, said.

A NATS requester chooses its reply subject, and the control plane answers over its own
connection, which may publish anywhere. Answering every request where it asks would let a
tenant steer the plane's answer onto another tenant's subjects (a queue stream, a result
key, a daemon's control subject). So the gateway answers only under the inbox the asker's
own grant lets it read (:mod:`lakeshore.security.grants`); any other request is dropped
unanswered before it is acted on, counted by route, and logged at most once a minute per
asker (a daemon, or the producers of one token: the plane does not see the requester's
connection, only who its subject or its token says it is).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How often one asker's dropped requests are logged (seconds).
LOG_EVERY_S = 60.0
#: Askers remembered for the log's pacing; the oldest is forgotten past it (a flood of
#: made-up identities must not grow the plane's memory).
REMEMBERED = 10_000


class SteeredReplies:
    """Counts and logs the requests dropped for their reply subject.

    Args:
        count: adds one to the drops of a route (the plane's metric).
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        count: Callable[[str], None] = lambda route: None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._count, self._clock = count, clock
        self._said: OrderedDict[str, float] = OrderedDict()
        #: drops since start, by route (what the metric counts, for tests and status)
        self.dropped: dict[str, int] = {}

    def drop(self, route: str, asker: str, subject: str, reply: str) -> None:
        """Record one request on ``subject`` whose ``reply`` is not ``asker``'s to read."""
        self.dropped[route] = self.dropped.get(route, 0) + 1
        self._count(route)
        now = self._clock()
        last = self._said.get(asker)
        if last is not None and now - last < LOG_EVERY_S:
            return
        self._said[asker] = now
        self._said.move_to_end(asker)
        while len(self._said) > REMEMBERED:
            self._said.popitem(last=False)
        log.warning(
            "dropped a %s request of %s on %s: its reply subject (%s…) is not under the "
            "asker's inbox (further drops of this asker are counted, not logged, for %.0f s)",
            route, asker, subject, ".".join(reply.split(".")[:3])[:80], LOG_EVERY_S,
        )  # fmt: skip
