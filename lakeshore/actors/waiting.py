"""The waiting room of a ``block`` queue: submits that found it full wait here for room.

The queue actor must keep answering while a submit waits (a ``GET``, or the very ``PATCH
max_depth`` that makes room), so a waiting submit is not held in its inbox: the actor
parks it here and answers its asker with a future. One task, owned by the room, retries
the oldest waiting submit with backoff — at once when :meth:`WaitingRoom.wake` says room
may have been made — and settles each submit's future in arrival order: admitted, or
:class:`~lakeshore.errors.QueueFull` once its ``wait_s`` has run out.

Arrival order is kept: while anyone waits, a new submit to the queue waits behind them
rather than taking the room they are waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from lakeshore.bus.port import Published
from lakeshore.errors import Internal, LakeshoreError, Unavailable
from lakeshore.model import InvocationEvent, SubmitAnswer
from lakeshore.preparation import Prepared

log = logging.getLogger(__name__)

#: Backoff between retries of a waiting submit (seconds): first, growth factor, cap.
BACKOFF_S = (0.05, 2.0, 1.0)


@dataclass(slots=True)
class Waiting:
    """A submit waiting for room: its items and what is already stored of them."""

    items: list[Prepared]
    published: list[Published | None]
    dropped: list[InvocationEvent]
    #: ``time.monotonic()`` after which it is refused
    deadline: float
    answer: asyncio.Future[SubmitAnswer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def next_index(self) -> int:
        """The first item not stored yet (``len(items)`` once all are)."""
        return next((i for i, p in enumerate(self.published) if p is None), len(self.items))


#: Tries to store the waiting submit's next items; returns whether all are stored now.
#: Raises a LakeshoreError to refuse the submit (the queue is no longer ``block`` or active).
Retry = Callable[[Waiting], Awaitable[bool]]
#: Settles an admitted submit (records its events); returns its answer.
Admit = Callable[[Waiting], Awaitable[SubmitAnswer]]
#: Settles a refused submit (records what was stored of it) and returns the error to raise.
Refuse = Callable[[Waiting, LakeshoreError | None], Awaitable[LakeshoreError]]


class WaitingRoom:
    """Args:
    retry, admit, refuse: the queue actor's side of a retry and of settling a submit.
    """

    def __init__(self, *, retry: Retry, admit: Admit, refuse: Refuse) -> None:
        self._retry, self._admit, self._refuse = retry, admit, refuse
        self._queue: deque[Waiting] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def park(self, waiting: Waiting) -> asyncio.Future[SubmitAnswer]:
        """Wait behind everyone already waiting; the future settles the submit."""
        self._queue.append(waiting)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="queue-waiting-room")
        return waiting.answer

    def wake(self) -> None:
        """Room may have been made (or the queue changed): retry now, not after backoff."""
        self._wake.set()

    async def close(self, error: LakeshoreError) -> None:
        """Stop retrying; every waiting submit is refused with ``error``."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        while self._queue:
            waiting = self._queue.popleft()
            if not waiting.answer.done():
                waiting.answer.set_exception(error)

    async def _run(self) -> None:
        first, growth, cap = BACKOFF_S
        delay = first
        while self._queue:
            head = self._queue[0]
            try:
                if head.answer.done():
                    self._queue.popleft()  # its asker is gone (stopped meanwhile)
                    continue
                if time.monotonic() >= head.deadline:
                    await self._settle(head, self._refuse(head, None))
                    continue
                self._wake.clear()
                if await self._retry(head):
                    await self._settle(head, self._admit(head))
                    delay = first
                    continue
            except LakeshoreError as e:
                await self._settle(head, self._refuse(head, e))
                continue
            except Exception:
                log.exception("waiting room: retrying a submit failed; refusing it")
                await self._settle(head, self._refuse(head, Unavailable("retry failed")))
                continue
            left = max(0.0, head.deadline - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(delay, left))
            delay = min(delay * growth, cap)

    async def _settle(
        self, head: Waiting, outcome: Awaitable[SubmitAnswer | LakeshoreError]
    ) -> None:
        self._queue.popleft()
        try:
            result = await outcome
        except LakeshoreError as e:
            result = e
        except Exception:
            log.exception("waiting room: settling a submit failed")
            result = Internal("settling the submit failed; see the server log")
        if head.answer.done():
            return
        if isinstance(result, LakeshoreError):
            head.answer.set_exception(result)
        else:
            head.answer.set_result(result)
