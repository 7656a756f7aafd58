"""How many queues get a label of their own: ``all``, ``top:N`` or ``none``.

Per-queue series are capped so a scrape stays bounded however many queues exist: the N
busiest queues (by pending plus running) keep their name, the rest of a namespace are
summed under :data:`OTHER`; ``none`` keeps only the namespace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from lakeshore.config import METRICS_PER_QUEUE
from lakeshore.errors import Invalid

#: The queue label of what the cap sums together.
OTHER = "_other"
_PATTERN = re.compile(METRICS_PER_QUEUE)


@dataclass(frozen=True, slots=True)
class QueueLabels:
    """The parsed policy: ``top`` is ``None`` for ``all``, 0 for ``none``."""

    top: int | None

    @classmethod
    def parse(cls, text: str) -> QueueLabels:
        """Raises:
        Invalid: not ``all``, ``none`` or ``top:N`` with 1 ≤ N ≤ 999999.
        """
        if not _PATTERN.match(text):
            raise Invalid(f"metrics_per_queue must be all, none or top:N, not {text!r}")
        if text == "all":
            return cls(None)
        if text == "none":
            return cls(0)
        return cls(int(text.removeprefix("top:")))

    @property
    def keeps_queue(self) -> bool:
        return self.top != 0

    def named(self, busy: Iterable[tuple[tuple[str, str], int]]) -> set[tuple[str, str]]:
        """The ``(namespace, queue)`` keys that keep their own label.

        Args:
            busy: every queue's key with its pending plus running count.
        """
        keys = list(busy)
        if self.top is None:
            return {k for k, _ in keys}
        # Ties go by name, so the same queues keep their series from one scrape to the next.
        ranked = sorted(keys, key=lambda kv: (-kv[1], kv[0]))
        return {k for k, _ in ranked[: self.top]}
