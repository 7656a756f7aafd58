"""Reading a job's live log: what is stored, then (following) what comes, attempt after
attempt, until the job ends.

The log of each attempt is its own subject in ``LS_LOGS`` (:mod:`lakeshore.bus.logs`); the
job's row says which attempts there are and whether it has ended. A follow reads the
current attempt; when the row shows a later attempt (a retry, or a run requeued after its
daemon was lost) it says so and moves on; when the row shows the job ended it waits a
moment for the attempt's last message (the daemon publishes it as the run ends, beside the
outcome), then ends with the job's state.
"""

from __future__ import annotations

import collections
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import msgspec

from lakeshore.model import TERMINAL_STATES, JobDetail
from lakeshore.model.logs import LogAttempt, LogChunk, LogEnd, LogLine, LogStream

#: While following, how long a read waits for output before the job's row is looked at
#: again (seconds).
POLL_S = 0.5
#: Once the job has ended, how long its last attempt's final message is waited for when
#: that attempt published output (seconds): the daemon publishes it as the run ends.
END_GRACE_S = 5.0
#: The same when the attempt has published nothing yet (a silent run publishes nothing).
SILENT_GRACE_S = 0.5
#: Without follow: how long a read waits before the stored log is taken as read (seconds).
STORED_READ_S = 1.0


class Record(Protocol):
    """One stored message of an attempt's log (:class:`lakeshore.bus.logs.LogRecord`)."""

    seq: int
    stream: str
    time: object
    data: bytes
    end: bool


class Tail(Protocol):
    """One attempt's log as it is read (:class:`lakeshore.bus.logs.LogTail`)."""

    caught_up: bool

    async def open(self) -> None: ...

    async def read(self, timeout_s: float) -> list[Record]: ...

    async def close(self) -> None: ...


class LogStore(Protocol):
    """Where attempts' logs are read (:class:`lakeshore.bus.logs.LogTails`)."""

    def tail(self, namespace: str, invocation_id: str, attempt: int) -> Tail: ...


class Jobs(Protocol):
    """The job rows (:class:`~lakeshore.services.jobs.JobService`)."""

    async def show(self, namespace: str, job_id: str) -> JobDetail: ...


@dataclass(frozen=True, slots=True)
class LogQuery:
    """What ``GET …/jobs/:id/logs`` asks for."""

    #: the attempt to start with (``None``: the latest one, or the first to come)
    attempt: int | None = None
    #: go on with new output, and with later attempts, until the job ends
    follow: bool = False
    #: skip the first attempt's chunks up to and including this sequence number
    after: int = 0
    #: of what the first attempt stored, only its last lines (``None``: all)
    tail: int | None = None
    #: only this stream's chunks (``None``: both)
    stream: LogStream | None = None


def latest_attempt(job: JobDetail) -> int | None:
    """The job's latest attempt (its number: its log's), ``None`` before its first."""
    return max((a.attempt for a in job.attempts), default=None)


def _later_attempt(job: JobDetail, than: int) -> int | None:
    return min((a.attempt for a in job.attempts if a.attempt > than), default=None)


class LogService:
    """A job's live log, for ``GET …/jobs/:id/logs`` (and so the SDK and CLI).

    Args:
        jobs: the job rows (which attempts there are, whether the job ended).
        store: the attempts' logs.
    """

    def __init__(self, *, jobs: Jobs, store: LogStore) -> None:
        self._jobs, self._store = jobs, store

    async def lines(self, namespace: str, job_id: str, query: LogQuery) -> AsyncIterator[LogLine]:
        """The lines of the answer (close the iterator when leaving early).

        Raises:
            NotFound: no such job in ``namespace`` (raised here, before any line).
        """
        job = await self._jobs.show(namespace, job_id)
        first = query.attempt or latest_attempt(job) or 1
        return self._lines(namespace, job, first, query)

    async def _lines(
        self, namespace: str, job: JobDetail, first: int, query: LogQuery
    ) -> AsyncIterator[LogLine]:
        current, after, tail = first, query.after, query.tail
        while True:
            reader = _Reader(self._store.tail(namespace, job.id, current), current, query.stream)
            await reader.tail.open()
            try:
                async for chunk in reader.stored(after, tail):
                    yield chunk
                if not query.follow:
                    job = await self._jobs.show(namespace, job.id)
                    yield LogEnd(state=str(job.state), attempt=current)
                    return
                after, tail = 0, None
                looked = time.monotonic()
                while True:
                    for chunk in await reader.next(POLL_S):
                        yield chunk
                    if time.monotonic() - looked < POLL_S and not reader.idle:
                        continue  # output flows: the row is looked at every POLL_S only
                    looked = time.monotonic()
                    job = await self._jobs.show(namespace, job.id)
                    if (later := _later_attempt(job, current)) is not None:
                        break
                    if job.state in TERMINAL_STATES:
                        async for chunk in reader.rest():
                            yield chunk
                        yield LogEnd(state=str(job.state), attempt=current)
                        return
                async for chunk in reader.drain():
                    yield chunk
            finally:
                await reader.tail.close()
            yield LogAttempt(attempt=later, previous=current)
            current = later


class _Reader:
    """One attempt's log as a follow reads it, as :class:`LogChunk` lines."""

    def __init__(self, tail: Tail, attempt: int, stream: str | None) -> None:
        self.tail, self._attempt, self._stream = tail, attempt, stream
        #: its last message was read: nothing more comes
        self.ended = False
        #: it has published anything (so its last message will come)
        self.published = False
        #: the last read found nothing new
        self.idle = False

    def _chunks(self, records: list[Record], after: int = 0) -> list[LogChunk]:
        out = []
        for r in records:
            self.published = True
            if r.end:
                self.ended = True
            elif r.seq > after and self._stream in (None, r.stream):
                out.append(
                    LogChunk(
                        seq=r.seq,
                        attempt=self._attempt,
                        stream="err" if r.stream == "err" else "out",
                        time=r.time,  # type: ignore[arg-type]
                        text=r.data.decode("utf-8", errors="replace"),
                    )
                )
        return out

    async def next(self, timeout_s: float) -> list[LogChunk]:
        """What came since the last read, waiting up to ``timeout_s`` for something."""
        records = await self.tail.read(timeout_s)
        self.idle = not records
        return self._chunks(records)

    async def stored(self, after: int, tail: int | None) -> AsyncIterator[LogChunk]:
        """What the attempt had stored when it was opened past ``after`` (of it, the last
        ``tail`` lines only)."""
        kept: collections.deque[LogChunk] = collections.deque()
        newlines = 0  # in ``kept`` after its first chunk
        while not self.tail.caught_up:
            for chunk in self._chunks(await self.tail.read(STORED_READ_S), after):
                if tail is None:
                    yield chunk
                    continue
                if kept:
                    newlines += chunk.text.count("\n")
                kept.append(chunk)
                # Bounded by the lines asked for, not by the log's size.
                while len(kept) > 1 and newlines > tail:
                    kept.popleft()
                    newlines -= kept[0].text.count("\n")
        for chunk in _last_lines(list(kept), tail or 0):
            yield chunk

    async def rest(self) -> AsyncIterator[LogChunk]:
        """The job has ended: what the attempt still publishes, until its last message or
        a grace."""
        grace = END_GRACE_S if self.published else SILENT_GRACE_S
        deadline = time.monotonic() + grace
        while not self.ended and (left := deadline - time.monotonic()) > 0:
            for chunk in await self.next(min(POLL_S, left)):
                yield chunk

    async def drain(self) -> AsyncIterator[LogChunk]:
        """A later attempt began: what this one still has, without waiting for more."""
        while not self.ended:
            chunks = await self.next(SILENT_GRACE_S)
            if self.idle:
                return
            for chunk in chunks:
                yield chunk


def _last_lines(chunks: list[LogChunk], n: int) -> list[LogChunk]:
    """The chunks that hold the last ``n`` lines of ``chunks`` (the first one cut)."""
    if n <= 0 or not chunks:
        return []
    need = n + (1 if chunks[-1].text.endswith("\n") else 0)
    kept: list[LogChunk] = []
    for chunk in reversed(chunks):
        text = chunk.text
        count = text.count("\n")
        if count < need:
            kept.append(chunk)
            need -= count
            continue
        pos = len(text)
        for _ in range(need):
            pos = text.rindex("\n", 0, pos)
        if rest := text[pos + 1 :]:
            kept.append(msgspec.structs.replace(chunk, text=rest))
        break
    return kept[::-1]


__all__ = ["LogQuery", "LogService", "latest_attempt"]
