"""How many result waits one org, and one asker, may hold open at once.

A result wait holds a subscription and a Recorder waiter for up to its ``wait_s``; one
tenant opening thousands of them would take the plane's time and memory from every other
org. Past either bound a wait is refused at once with a 429 naming the quota (a wait with
``wait_s=0`` is a plain read and is not counted).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from lakeshore.errors import QuotaExceeded
from lakeshore.quotas import Quotas


class ResultWaits:
    """The result waits open now, by org and by asker.

    Args:
        quotas: ``result_waits_per_org`` and ``result_waits_per_asker``.
    """

    def __init__(self, quotas: Quotas) -> None:
        self._quotas = quotas
        self._orgs: Counter[str] = Counter()
        self._askers: Counter[str] = Counter()

    @contextlib.contextmanager
    def hold(self, org: str, asker: str) -> Iterator[None]:
        """Count one wait of ``asker`` (a token, or a NATS connection) in ``org`` while the
        block runs.

        Raises:
            QuotaExceeded: ``result_waits_per_org`` or ``result_waits_per_asker``.
        """
        per_org, per_asker = self._quotas.result_waits_per_org, self._quotas.result_waits_per_asker
        if self._orgs[org] >= per_org:
            raise QuotaExceeded(
                "result_waits_per_org", per_org,
                f"org {org!r} holds {self._orgs[org]} result waits open",
                "wait for fewer jobs at once (or poll with wait_s=0), or ",
            )  # fmt: skip
        if self._askers[asker] >= per_asker:
            raise QuotaExceeded(
                "result_waits_per_asker", per_asker,
                f"{asker} holds {self._askers[asker]} result waits open",
                "wait for fewer jobs at once from one client, or ",
            )  # fmt: skip
        self._orgs[org] += 1
        self._askers[asker] += 1
        try:
            yield
        finally:
            for counts, key in ((self._orgs, org), (self._askers, asker)):
                counts[key] -= 1
                if counts[key] <= 0:
                    del counts[key]

    def open(self, org: str) -> int:
        """The waits ``org`` holds open now."""
        return self._orgs[org]
