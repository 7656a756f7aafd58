"""The Recorder's retention policy: fold old finished invocations into per-minute aggregates,
then delete their events (the Recorder is the history's one writer, so this runs on its
inbox: ``runtime.every(…, recorder, Compact(…))``)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Protocol

from msgspec import Struct

from lakeshore.model.history import Compacted

log = logging.getLogger(__name__)


class Compact(Struct, frozen=True, kw_only=True):
    """Answered with :class:`~lakeshore.model.history.Compacted`."""

    #: keep the events of finished invocations this long (seconds); ``None``: forever
    raw_keep_s: float | None
    #: keep the per-minute aggregates this long (seconds); ``None``: forever
    minutes_keep_s: float | None = None


class HistoryCompaction(Protocol):
    async def compact_history(
        self, raw_before: datetime | None, minutes_before: datetime | None = None
    ) -> Compacted:
        """Aggregate, then delete, finished invocations older than ``raw_before``; delete
        aggregates older than ``minutes_before``."""


async def compact(store: HistoryCompaction, msg: Compact, at: datetime) -> Compacted:
    """Run one compaction as of ``at``."""

    def before(keep_s: float | None) -> datetime | None:
        return None if keep_s is None else at - timedelta(seconds=keep_s)

    done = await store.compact_history(before(msg.raw_keep_s), before(msg.minutes_keep_s))
    if done.invocations or done.dropped_minutes:
        log.info(
            "history compacted: %d invocation(s), %d event row(s) into %d minute row(s); "
            "%d old minute row(s) dropped",
            done.invocations, done.rows, done.minutes, done.dropped_minutes,
        )  # fmt: skip
    return done


def keep_s(days: float | None) -> float | None:
    """A retention in days (config) as seconds (``None``: forever)."""
    return None if days is None else days * 86400.0


__all__ = ["Compact", "HistoryCompaction", "compact", "keep_s"]
