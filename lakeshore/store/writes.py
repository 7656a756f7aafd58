"""Row writes, in batches: planned against the file, logged, then committed together.

Every write of a logged row (:mod:`lakeshore.store.images`) is a *plan*: a function run on
the store's thread that checks the rows (a name taken, a row missing) and answers the
images of what changes, with the write's result. Writes queue up while a batch is on its
way and go as the next batch, so a burst (a thousand daemons registering) costs a few
round trips to NATS rather than one each:

1. ``BEGIN``; each plan runs in turn and its images are applied at once, so the next plan
   sees them (a plan that refuses changes nothing and fails only its own write);
2. the images go to the :class:`RowLog` — the leader's fenced state stream — and the
   batch waits, on the store's thread, for them to be acknowledged (reads wait too: no
   one sees a row the log has not taken);
3. ``COMMIT`` with the log's sequence as the file's position; then every write is answered.

If the log refuses (``NotLeader``: a newer leader) or fails, the batch is rolled back and
each write fails with that error — except, when a newer leader refused the batch part way,
the writes whose images all landed before: those are done (the log holds them; this file
gets them from the projector). A commit that fails after the log took the images (a
full disk) keeps them, and applies them before anything new is planned. Without a log (a
store opened on its own, as the store's tests do) the batch is committed as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import duckdb

from lakeshore.errors import NotLeader, Unavailable
from lakeshore.futures import mark_retrieved
from lakeshore.model.images import Image
from lakeshore.store import _rows, images
from lakeshore.store.images import STATE_LOG

Con = duckdb.DuckDBPyConnection
T = TypeVar("T")
Plan = Callable[[Con], tuple[list[Image], Any]]
#: A plan for several writes of one kind at once: the images, and one outcome per item
#: (its result, or the exception that refuses it alone).
ManyPlan = Callable[[Con, list[Any]], tuple[list[Image], list[Any]]]
#: Most writes in one batch.
MAX_BATCH = 512
#: Longest wait for the log to take a batch (seconds; its own requests time out sooner).
LOG_TIMEOUT_S = 60.0


class RowLog(Protocol):
    """Where a batch's images go before it is committed (the plane's state stream)."""

    async def ready(self) -> None:
        """Called before each batch, off the store's thread (e.g. to catch the file up
        after a write whose outcome the log did not tell)."""

    async def append(self, images: list[Image]) -> int:
        """Log ``images``; the sequence of the last one.

        Raises:
            NotLeader: this control plane may not write (nothing of the batch is applied).
            Unavailable: the log did not take them all.
        """


class WriteBatches:
    """The write path of :class:`~lakeshore.store.duckdb.Store` (mixed in)."""

    if TYPE_CHECKING:
        _queue_rows: Any

        async def _run(self, fn: Callable[[Con], T]) -> T: ...

    def _init_writes(self, con: Con) -> None:
        self._log: RowLog | None = None
        self._queued: list[tuple[Plan, asyncio.Future[Any]]] = []
        #: the merged write still queued, per kind (see :meth:`_write_merged`)
        self._merging: dict[str, _Merged] = {}
        self._writer: asyncio.Task[None] | None = None
        #: images the log took whose commit failed, with their sequence
        self._unapplied: tuple[list[Image], int] | None = None
        #: the state stream's sequence this file has applied (see ``log_positions``)
        self.state_position = images.position(con, STATE_LOG) or 0

    def write_through(self, log: RowLog | None) -> None:
        """Log every later batch to ``log`` before committing it (``None``: commit only)."""
        self._log = log

    async def _write(self, plan: Plan) -> Any:
        """Queue ``plan`` for the next batch; its result once the batch is committed."""
        return await self._enqueue(plan)

    def _enqueue(self, plan: Plan) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._queued.append((plan, answer))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_batches(), name="store-writes")
        return answer

    async def _write_merged(self, kind: str, item: Any, plan: ManyPlan) -> Any:
        """Queue ``item`` for one ``plan`` with the other items of ``kind`` queued while
        no batch took them: a burst of like writes (a fleet registering) is checked and
        applied in a few statements for all, rather than a few each. Answers the item's
        own outcome (raises its own refusal)."""
        merged = self._merging.get(kind)
        if merged is None or len(merged.items) >= MAX_BATCH:
            merged = self._merging[kind] = _Merged(plan)
            merged.answer = self._enqueue(merged.run)
            # Shielded: when every writer was cancelled (a stopping plane), nobody reads it.
            merged.answer.add_done_callback(mark_retrieved)
        index = len(merged.items)
        merged.items.append(item)
        outcome = (await asyncio.shield(merged.answer))[index]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _write_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queued:
            batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
            self._merging.clear()  # what a batch took gets no more items
            log = self._log
            try:
                if log is not None:
                    await log.ready()
                commit = functools.partial(self._commit, batch=batch, log=log, loop=loop)
                outcomes = await self._run(commit)
            except Exception as e:  # the whole batch: refused, or not committed
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(e)
                continue
            for (_, answer), (ok, value) in zip(batch, outcomes, strict=True):
                if not answer.done():
                    (answer.set_result if ok else answer.set_exception)(value)

    def _commit(
        self,
        con: Con,
        *,
        batch: Sequence[tuple[Plan, asyncio.Future[Any]]],
        log: RowLog | None,
        loop: asyncio.AbstractEventLoop,
    ) -> list[tuple[bool, Any]]:
        """Steps 1–3 of the module docstring, on the store's thread."""
        if self._unapplied is not None:
            kept, seq = self._unapplied
            _rows.transaction(con, lambda c: images.apply(c, kept, seq))
            self._unapplied, self.state_position = None, seq
        outcomes: list[tuple[bool, Any]] = []
        planned: list[Image] = []
        spans: list[range] = []  # each outcome's images in ``planned``
        seq = None
        con.execute("BEGIN TRANSACTION")
        try:
            for plan, _ in batch:
                try:
                    changes, result = plan(con)
                except Exception as e:  # the plan's refusal: its write fails, not the batch
                    outcomes.append((False, e))
                    spans.append(range(0))
                    continue
                images.apply(con, changes, None)
                spans.append(range(len(planned), len(planned) + len(changes)))
                planned += changes
                outcomes.append((True, result))
            if planned and log is not None:
                sent = asyncio.run_coroutine_threadsafe(log.append(planned), loop)
                try:
                    seq = sent.result(LOG_TIMEOUT_S)
                except NotLeader as e:
                    if not e.landed:
                        raise
                    con.execute("ROLLBACK")  # the projector applies what landed
                    self._queue_rows = None
                    return _partly_logged(outcomes, spans, e)
                images.set_position(con, STATE_LOG, seq)
        except BaseException:
            con.execute("ROLLBACK")
            raise
        try:
            con.execute("COMMIT")
        except BaseException:
            if seq is not None:  # logged but not in the file: applied before the next batch
                self._unapplied = (planned, seq)
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        if seq is not None:
            self.state_position = seq
        if any(image.kind == "queue" for image in planned):
            self._queue_rows = None
        return outcomes

    async def close_writes(self) -> None:
        """Let the batch under way finish (the writes queued after it fail)."""
        if self._writer is not None and not self._writer.done():
            with contextlib.suppress(Exception):
                await self._writer

    # ---- the projector's side -----------------------------------------------------------

    async def apply_images(self, batch: Sequence[Image], seq: int | None) -> None:
        """Apply images in order and record ``seq`` as the state log's position, atomically
        (a standby's projector; a leader's own writes are applied as they commit)."""

        def work(con: Con) -> None:
            if "queue" in _rows.transaction(con, lambda c: images.apply(c, batch, seq)):
                self._queue_rows = None
            if seq is not None:
                self.state_position = seq

        await self._run(work)

    async def log_position(self, log: str) -> int | None:
        """The last sequence of ``log`` (:data:`images.STATE_LOG` …) applied to this file."""
        return await self._run(lambda con: images.position(con, log))

    async def all_images(self) -> list[Image]:
        """Every logged row as an image."""
        return await self._run(images.all_images)


def _partly_logged(
    outcomes: list[tuple[bool, Any]], spans: list[range], refused: NotLeader
) -> list[tuple[bool, Any]]:
    """The answers of a batch the log took a part of before a newer leader refused the
    rest: a write all of whose images landed is done (the log is the truth; the new leader
    holds it), one none of whose did is refused (safe to send again, to the leader), and
    one in between is said to be unsure rather than retried into ``already exists``."""
    answers: list[tuple[bool, Any]] = []
    for (ok, value), span in zip(outcomes, spans, strict=True):
        held = sum(index in refused.landed for index in span)
        if not ok or held == len(span):
            answers.append((ok, value))
        elif held == 0:
            answers.append((False, refused))
        else:
            answers.append((False, Unavailable(
                "the control plane lost its lead while logging this write: part of it "
                "was taken; read the rows it changes, then retry what is missing"
            )))  # fmt: skip
    return answers


class _Merged:
    """Items of one kind queued for a single :data:`ManyPlan` (see
    :meth:`WriteBatches._write_merged`)."""

    answer: asyncio.Future[Any]
    """The outcomes of all items, once the batch that took them is committed."""

    def __init__(self, plan: ManyPlan) -> None:
        self.plan = plan
        self.items: list[Any] = []

    def run(self, con: Con) -> tuple[list[Image], list[Any]]:
        return self.plan(con, self.items)
