"""Tenants' reads: on threads of their own, shared between orgs in turn.

The store's one thread runs the control plane's own work in call order: every row write
(a registration, a heartbeat that changes a daemon's status, the Recorder's appends) and
the reads of the registry, the controller and the Recorder. A read that a tenant asks for
— a job with its rank in the backlog, a page of jobs, a queue's stats, its workers — can
take a hundred milliseconds at a large backlog, and one org can ask for thousands at once
(every result wait reads its job when it ends): queued on that thread, they held every
other org's requests and the daemons' heartbeats behind them (issue 21).

So these reads run in :class:`FairReads`: on :data:`LANES` threads of their own, each with
its own cursor on the file, never on the store's thread. Each org has at most one read
running at a time, and the orgs with reads queued are served in turn: a flood of one org's
reads occupies one lane, and another org's read waits at most for the read running on the
other. (The lanes run at the process's CPU priority: nicer lanes, tried, made another
org's own reads and its daemons' status-changing heartbeats ten times slower at p99 on a
busy host, idle or not.)

A cursor sees what was committed when its statement began (DuckDB's MVCC): never a batch
still waiting for the state log, and every write whose call has returned.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import duckdb

from lakeshore import errors

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")

#: Threads (each with its cursor) for the tenants' reads: two orgs' reads run side by side.
LANES = 2


@dataclass(slots=True)
class _Lane:
    cursor: Con
    executor: ThreadPoolExecutor


@dataclass(slots=True)
class _Read:
    fn: Callable[[Con], Any]
    answer: asyncio.Future[Any]


class FairReads:
    """Runs read-only functions of a cursor: one at a time per org, the orgs in turn.

    Build it with :meth:`open`.
    """

    def __init__(self, lanes: list[_Lane]) -> None:
        self._lanes = list(lanes)
        self._idle = list(lanes)
        #: org -> its reads not started yet, oldest first
        self._queued: dict[str, deque[_Read]] = {}
        #: orgs with a read queued and none running, in the order they are served
        self._turns: deque[str] = deque()
        #: orgs with a read running
        self._running: set[str] = set()
        self._closed = False

    @classmethod
    def open(cls, cursors: list[Con]) -> FairReads:
        """Reads over ``cursors`` (made by the store's thread with ``con.cursor()``), each
        then used on a thread of its own only."""
        return cls([
            _Lane(c, ThreadPoolExecutor(1, f"lakeshore-reads-{i}"))
            for i, c in enumerate(cursors)
        ])  # fmt: skip

    async def run(self, org: str, fn: Callable[[Con], T]) -> T:
        """``fn(cursor)`` on a lane, once it is ``org``'s turn.

        Raises:
            errors.Unavailable: the reads are closed, or the file could not be read.
        """
        if self._closed:
            raise errors.Unavailable("the store is closed")
        read = _Read(fn, asyncio.get_running_loop().create_future())
        self._queued.setdefault(org, deque()).append(read)
        if org not in self._running and org not in self._turns:
            self._turns.append(org)
        self._dispatch()
        try:
            return await read.answer
        except (duckdb.IOException, duckdb.TransactionException) as e:
            raise errors.Unavailable(f"the store could not be read: {e}") from e

    def queued(self, org: str) -> int:
        """``org``'s reads waiting for their turn (not running yet)."""
        return len(self._queued.get(org, ()))

    def _dispatch(self) -> None:
        while self._idle and self._turns:
            org = self._turns.popleft()
            waiting = self._queued[org]
            while waiting and waiting[0].answer.done():  # its asker gave up
                waiting.popleft()
            if not waiting:
                del self._queued[org]
                continue
            read = waiting.popleft()
            if not waiting:
                del self._queued[org]
            lane = self._idle.pop()
            self._running.add(org)
            done = asyncio.get_running_loop().run_in_executor(lane.executor, read.fn, lane.cursor)
            done.add_done_callback(functools.partial(self._finished, org, lane, read))

    def _finished(self, org: str, lane: _Lane, read: _Read, done: asyncio.Future[Any]) -> None:
        self._idle.append(lane)
        self._running.discard(org)
        if not read.answer.done():
            if done.cancelled():
                read.answer.set_exception(errors.Unavailable("the read was cancelled"))
            elif (e := done.exception()) is not None:
                read.answer.set_exception(e)
            else:
                read.answer.set_result(done.result())
        elif not done.cancelled():
            done.exception()  # the asker left: its failure is nobody's
        if org in self._queued and org not in self._turns:
            self._turns.append(org)
        if not self._closed:
            self._dispatch()

    async def close(self) -> None:
        """Refuse the reads not started, let those running end, close the cursors."""
        if self._closed:
            return
        self._closed = True
        for waiting in self._queued.values():
            for read in waiting:
                if not read.answer.done():
                    read.answer.set_exception(errors.Unavailable("the store is closed"))
        self._queued.clear()
        self._turns.clear()
        loop = asyncio.get_running_loop()
        for lane in self._lanes:
            # Queued behind the read running on it, if any.
            try:
                await loop.run_in_executor(lane.executor, lane.cursor.close)
            finally:
                lane.executor.shutdown(wait=False)


__all__ = ["LANES", "FairReads"]
