"""The ranks of a queue's pending backlog, kept until the queue's history changes.

A pending job shows its ``position``: how many pending jobs of its queue come before it.
Ranking one job costs as much as ranking the whole backlog (the state of every unfinished
invocation of the queue is aggregated from its events): about 100 ms at 100k pending. A
result wait reads its job when it ends, so thousands of waits on one large backlog ranked
it thousands of times over, each time to the same answer (issue 21).

:class:`Ranks` keeps the whole ranking of a queue once it was asked twice at one version
of the queue's history, and answers from it until an append or a compaction of history
changes the queue (exact: no rank from before a change whose call has returned). The first
ask at a version takes only the asked ids' ranks out of the database: a backlog that keeps
changing (a submit between any two asks) costs what it did before, never the conversion of
the whole ranking into Python (about 50 ms of the GIL at 100k, which the event loop waits
for). Memory is bounded by :data:`BUDGET` ranked ids over all queues (the least recently
used are forgotten first); a backlog larger than that is ranked per request, as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import duckdb

from lakeshore.store import job_sql as q

Con = duckdb.DuckDBPyConnection
Key = tuple[str, str]

#: Most ranked ids kept over all queues (about 150 bytes each).
BUDGET = 250_000


class Ranks:
    """The pending ranks of queues, valid while their history is unchanged.

    Used from the store's threads: :meth:`positions` on any of them, :meth:`changed` by
    the writers of ``invocation_events`` once a change is committed.
    """

    def __init__(self, budget: int = BUDGET) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        #: (namespace, queue) -> how many committed changes of its history
        self._versions: dict[Key, int] = {}
        #: changes of every queue's history at once (a compaction)
        self._epoch = 0
        #: (namespace, queue) -> (the version it was ranked at, id -> position)
        self._kept: OrderedDict[Key, tuple[tuple[int, int], dict[str, int]]] = OrderedDict()
        self._size = 0
        #: (namespace, queue) -> the version it was last ranked at, by the asked ids only
        self._asked: dict[Key, tuple[int, int]] = {}

    def changed(self, keys: Iterable[Key]) -> None:
        """The history of these queues changed (committed): their ranks are recomputed."""
        with self._lock:
            for key in keys:
                self._versions[key] = self._versions.get(key, 0) + 1
                self._forget(key)
                self._asked.pop(key, None)

    def changed_all(self) -> None:
        """Every queue's history may have changed."""
        with self._lock:
            self._epoch += 1
            self._kept.clear()
            self._size = 0
            self._asked.clear()

    def positions(self, con: Con, namespace: str, queue: str, ids: Sequence[str]) -> dict[str, int]:
        """How many pending invocations of the queue are ahead of each of ``ids`` that is
        pending (0: the next one delivered); ids not pending are absent."""
        if not ids:
            return {}
        key = (namespace, queue)
        with self._lock:
            # Read before the query: a change committed meanwhile makes what it reads old.
            version = (self._versions.get(key, 0), self._epoch)
            kept = self._kept.get(key)
            if kept is not None and kept[0] == version:
                self._kept.move_to_end(key)
                ranks = kept[1]
                return {i: ranks[i] for i in ids if i in ranks}
            # Asked again at this version: the whole ranking is worth taking out, and keeping.
            again = self._asked.get(key) == version
        limit = self._budget if again else -1
        rows = con.execute(
            q.RANKS, [namespace, queue, namespace, queue, limit, list(ids)]
        ).fetchall()
        whole = bool(rows) and rows[0][2] <= limit
        ranks = {row[0]: row[1] for row in rows}
        with self._lock:
            if (self._versions.get(key, 0), self._epoch) == version:
                if whole:
                    self._keep(key, version, ranks)
                    self._asked.pop(key, None)
                else:
                    self._asked[key] = version
        return {i: ranks[i] for i in ids if i in ranks}

    def _keep(self, key: Key, version: tuple[int, int], ranks: dict[str, int]) -> None:
        self._forget(key)
        while self._kept and self._size + len(ranks) > self._budget:
            _, (_, old) = self._kept.popitem(last=False)
            self._size -= len(old)
        self._kept[key] = (version, ranks)
        self._size += len(ranks)

    def _forget(self, key: Key) -> None:
        gone = self._kept.pop(key, None)
        if gone is not None:
            self._size -= len(gone[1])


__all__ = ["BUDGET", "Ranks"]
