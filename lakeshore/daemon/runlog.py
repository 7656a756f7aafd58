"""A run's live output, published to JetStream as it comes (spec/runs.md §2).

A :class:`RunLog` per attempt buffers what the run writes and one task of :class:`RunLogs`
per attempt publishes it (:mod:`lakeshore.bus.logs` has the message shape), started by the
run's first output: a silent run costs no task and publishes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakeshore.bus.logs import chunk_headers, end_headers
from lakeshore.daemon.runner import STDERR
from lakeshore.errors import LakeshoreError

if TYPE_CHECKING:
    from lakeshore.bus.port import LogPort
    from lakeshore.model import Invocation

log = logging.getLogger(__name__)

#: A run's output waits at most this long before it is published (seconds).
FLUSH_S = 0.2
#: Most bytes of one published chunk; this much buffered is published at once.
CHUNK_BYTES = 64 * 1024
#: Most bytes a run's log holds unpublished (NATS cut off, or slower than the run): past
#: it the middle is dropped, and the log says so.
BUFFER_BYTES = 8 * 1024 * 1024
#: Most bytes of one attempt's output published (``log_max_bytes``); the rest is counted.
LOG_MAX_BYTES = 16 * 1024 * 1024
#: Pauses between attempts to publish a chunk NATS did not take (seconds).
RETRY_S = (0.1, 0.25, 0.5, 1.0, 2.0)
#: How long the daemon's stop waits for the logs still buffered (seconds).
CLOSE_S = 5.0


def _utf8_whole(data: bytes | bytearray) -> int:
    """How many leading bytes of ``data`` end on a whole UTF-8 character: a chunk cut
    there never splits one (a reader decodes each chunk alone)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b < 0x80:
            return n  # ASCII: whole
        if b >= 0xC0:  # a lead byte: whole if its sequence is complete
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n if back >= need else n - back
    return n  # no lead byte in reach: not UTF-8, cut anywhere


class _Seg:
    """Buffered output of one stream, in order, published as one chunk."""

    __slots__ = ("at", "data", "stream")

    def __init__(self, stream: str, data: bytes | bytearray, at: float) -> None:
        self.stream, self.data, self.at = stream, bytearray(data), at


class RunLog:
    """One attempt's live output: :meth:`write` takes what the run writes (never blocks),
    :meth:`end` says the run is over; the owning :class:`RunLogs` publishes it, from the
    first output on (``on_output`` is called then, once). ``nonce`` makes its chunks'
    message ids unique.

    Writes come from the event loop's thread (the runner reads the run's pipes there).
    """

    def __init__(
        self,
        bus: LogPort,
        namespace: str,
        invocation_id: str,
        attempt: int,
        *,
        nonce: str,
        on_output: Callable[[RunLog], None],
        max_bytes: int = LOG_MAX_BYTES,
        buffer_bytes: int = BUFFER_BYTES,
        chunk_bytes: int = CHUNK_BYTES,
        flush_s: float = FLUSH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._bus, self._ns, self.invocation_id, self.attempt = (
            bus, namespace, invocation_id, attempt,
        )  # fmt: skip
        self._max, self._bound, self._chunk, self._flush_s = (
            max_bytes, buffer_bytes, chunk_bytes, flush_s,
        )  # fmt: skip
        self._clock = clock
        #: the oldest unpublished output, and (past the bound) the newest, the middle
        #: between them dropped: ``_gap`` bytes, said once ``_head`` is out
        self._head: deque[_Seg] = deque()
        self._tail: deque[_Seg] = deque()
        self._split, self._gap = False, 0
        self._buffered = 0
        #: per stream: the end of a character that a write cut in two
        self._carry: dict[str, bytes] = {}
        #: bytes taken for publishing (at most ``max_bytes``), and those refused past it
        self.taken, self.capped = 0, 0
        #: bytes dropped from the middle of the buffer in all
        self.shed = 0
        #: chunks published (the last sequence number used)
        self.seq = 0
        self.ended = False
        self._nonce = nonce
        self._on_output: Callable[[RunLog], None] | None = on_output
        self._data, self._full = asyncio.Event(), asyncio.Event()

    # ---- the run's side ------------------------------------------------------------------

    def write(self, stream: str, chunk: bytes) -> None:
        """Take ``chunk`` of ``stream`` (``out`` or ``err``); never blocks, never raises."""
        if self.ended or not chunk:
            return
        if self._on_output is not None:  # the first output: publishing starts
            on_output, self._on_output = self._on_output, None
            on_output(self)
        data = self._carry.pop(stream, b"") + chunk
        room = self._max - self.taken
        if len(data) > room:
            self.capped += len(data) - max(room, 0)
            data = data[: max(room, 0)]
            if not data:
                return
        else:
            whole = _utf8_whole(data)
            if whole < len(data):
                self._carry[stream] = data[whole:]
                data = data[:whole]
        self.taken += len(data)
        self._append(stream, data)

    def end(self) -> None:
        """The run is over: what is buffered goes out, then the attempt's last message."""
        if self.ended:
            return
        for stream, rest in self._carry.items():
            self._append(stream, rest)
        self._carry.clear()
        self.ended = True
        self._data.set()
        self._full.set()

    def _append(self, stream: str, data: bytes) -> None:
        at = self._clock()
        into = self._tail if self._split else self._head
        for i in range(0, len(data), self._chunk):
            part = data[i : i + self._chunk]
            last = into[-1] if into else None
            fits = last is not None and len(last.data) + len(part) <= self._chunk
            if last is not None and fits and last.stream == stream:
                last.data += part
            else:
                into.append(_Seg(stream, part, at))
            self._buffered += len(part)
        if self._buffered > self._bound:
            self._shed()
        self._data.set()
        if self._buffered >= self._chunk:
            self._full.set()

    def _shed(self) -> None:
        """Drop the middle of what is buffered: the oldest half of the bound is kept (it
        goes out first), then the newest output, the bytes between them dropped."""
        if not self._split:
            self._split = True
            rest, kept = self._head, 0
            self._head = deque()
            while rest and (room := self._bound // 2 - kept) > 0:
                seg = rest.popleft()
                if len(seg.data) > room:
                    self._head.append(_Seg(seg.stream, seg.data[:room], seg.at))
                    del seg.data[:room]
                    rest.appendleft(seg)
                    break
                self._head.append(seg)
                kept += len(seg.data)
            rest.extend(self._tail)
            self._tail = rest
        excess = self._buffered - self._bound
        while excess > 0 and self._tail:
            seg = self._tail[0]
            cut = min(excess, len(seg.data))
            if cut == len(seg.data):
                self._tail.popleft()
            else:
                del seg.data[:cut]  # may split a character: a reader shows U+FFFD there
            excess -= cut
            self._gap += cut
            self.shed += cut
            self._buffered -= cut

    # ---- the publisher's side ------------------------------------------------------------

    def _next(self) -> tuple[str, bytes, float] | None:
        """The next chunk to publish, out of the buffer; ``None`` when it is empty."""
        if self._head:
            seg = self._head.popleft()
            self._buffered -= len(seg.data)
            return seg.stream, bytes(seg.data), seg.at
        if self._split:
            gap = self._gap
            self._head, self._tail = self._tail, deque()
            self._split, self._gap = False, 0
            if not gap:
                return self._next()
            note = (
                f"\n[lakeshore: … {gap:,} bytes dropped (the daemon could not publish them in "
                "time) …]\n"
            )
            return STDERR, note.encode(), self._clock()
        return None

    async def run(self) -> None:
        """Publish until the run has ended and all it wrote is out (cancel to give up)."""
        while True:
            await self._data.wait()
            if not self.ended and self._buffered < self._chunk:
                # Trickling output waits a moment for more, so it goes in few messages.
                self._full.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._flush_s):
                        await self._full.wait()
            self._data.clear()
            while (chunk := self._next()) is not None:
                await self._publish(*chunk)
            if self.ended and not self._head and not self._split:
                break
        if self.capped:
            note = (
                f"\n[lakeshore: … {self.capped:,} bytes dropped: this attempt's log keeps at "
                f"most {self._max:,} bytes (log_max_bytes) …]\n"
            )
            await self._publish(STDERR, note.encode(), self._clock())
        if self.seq:  # a silent run publishes nothing at all
            await self._publish(None, b"", self._clock())

    async def _publish(self, stream: str | None, data: bytes, at: float) -> None:
        """Publish one chunk (``stream`` ``None``: the end), retrying until it is stored."""
        self.seq += 1
        msg_id = f"{self._nonce}.{self.seq}"
        if stream is None:
            headers = end_headers(msg_id, self.seq, at)
        else:
            headers = chunk_headers(msg_id, self.seq, stream, at)
        tries = 0
        while True:
            if self._bus.connected:
                try:
                    await self._bus.publish_log(
                        self._ns, self.invocation_id, self.attempt, data, headers
                    )
                    return
                except LakeshoreError as e:
                    if tries == 0:
                        log.warning(
                            "log of %s attempt %d: %s; retrying",
                            self.invocation_id, self.attempt, e,
                        )  # fmt: skip
            await asyncio.sleep(RETRY_S[min(tries, len(RETRY_S) - 1)])
            tries += 1

    @property
    def unpublished(self) -> int:
        """Bytes still buffered."""
        return self._buffered


class RunLogs:
    """The live logs of a daemon's runs: one :class:`RunLog` per attempt, each published by
    a task this owns. Build one per daemon; :meth:`close` at its stop.

    Args:
        bus: the daemon's connection.
        namespace: the daemon's namespace (its runs' logs are there).
        max_bytes: ``log_max_bytes``: most bytes of one attempt's output kept.
        buffer_bytes: most bytes of one attempt held unpublished.
    """

    def __init__(
        self,
        bus: LogPort,
        namespace: str,
        *,
        max_bytes: int = LOG_MAX_BYTES,
        buffer_bytes: int = BUFFER_BYTES,
        flush_s: float = FLUSH_S,
    ) -> None:
        self._bus, self._ns = bus, namespace
        self._max, self._bound, self._flush_s = max_bytes, buffer_bytes, flush_s
        self._open: dict[asyncio.Task[None], RunLog] = {}
        # Per daemon process, so message ids never repeat those of its last run.
        self._prefix = secrets.token_hex(6)
        self._logs = itertools.count()

    def open(self, inv: Invocation, attempt: int) -> RunLog:
        """The log of attempt number ``attempt`` of ``inv``; its publishing starts with
        its first output."""
        return RunLog(
            self._bus, self._ns, inv.id, attempt,
            nonce=f"{self._prefix}{next(self._logs):x}", on_output=self._publish,
            max_bytes=self._max, buffer_bytes=self._bound, flush_s=self._flush_s,
        )  # fmt: skip

    def _publish(self, run_log: RunLog) -> None:
        name = f"log {run_log.invocation_id} {run_log.attempt}"
        task = asyncio.create_task(run_log.run(), name=name)
        self._open[task] = run_log
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._open.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("a run's log publisher failed", exc_info=task.exception())

    @property
    def buffered(self) -> int:
        """Bytes of every open log not yet published."""
        return sum(r.unpublished for r in self._open.values())

    async def close(self, timeout_s: float = CLOSE_S) -> None:
        """Publish what is buffered, for up to ``timeout_s``; then give up on the rest."""
        for run_log in self._open.values():
            run_log.end()  # the runs are over by now; a log left open ends here
        tasks = list(self._open)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        if pending:
            lost = sum(self._open[t].unpublished for t in pending if t in self._open)
            log.error("stopping with %d run log(s) not published (%d bytes)", len(pending), lost)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
