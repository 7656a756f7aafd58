"""Waiting for an invocation, and the :class:`Invocation` handle that ``udf`` returns.

Waiting never busy-polls: it long-polls the result route (``wait_s``) in slices shorter
than the client's request timeout, so an unbounded wait is a sequence of held requests. A
wait rides out a control plane's restart or failover (up to the client's ``failover_s``):
a slice it could not get answered is asked again.

What a finished invocation gives back: its value, or one of the :class:`JobFailed`
exceptions — :class:`RemoteError` (it raised, or its command failed), :class:`JobCancelled`
or :class:`JobDropped`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import msgspec

from lakeshore.errors import LakeshoreError, NotLeader, Unavailable
from lakeshore.model import Job, JobDetail, Result
from lakeshore.model.logs import LogEnd, LogLine
from lakeshore.sdk import sync
from lakeshore.sdk.client import Client
from lakeshore.sdk.transport import api_path

T = TypeVar("T")

log = logging.getLogger(__name__)

#: The result route holds a request at most this long (seconds).
MAX_WAIT_S = 600.0
#: Fewest seconds between two polls, should a server answer "unfinished" early.
MIN_POLL_S = 0.5
#: Pause before a wait the control plane could not answer is asked again (seconds).
OUTAGE_PAUSE_S = 0.25
#: Error types the result route uses for invocations that never ran to their end.
CANCELLED_TYPE = "lakeshore.Cancelled"
DROPPED_TYPE = "lakeshore.Dropped"


class JobFailed(LakeshoreError):
    """An invocation finished without a value.

    Attributes:
        invocation_id: the invocation.
        result: the result the server answered (``ok`` false), with ``error``,
            ``exit_code`` and the tail of a command's ``output``.
    """

    code = "job_failed"

    def __init__(self, invocation_id: str, result: Result, message: str) -> None:
        self.invocation_id, self.result = invocation_id, result
        super().__init__(message)


class RemoteError(JobFailed):
    """The invocation's function raised (or its command failed) on its last attempt.

    Attributes:
        remote_type: the exception's qualified type on the daemon, e.g.
            ``builtins.ValueError`` (a failed command: ``subprocess.CalledProcessError``).
        remote_message: the exception's message.
        traceback: the remote traceback text (also attached as a note, so an uncaught
            error prints it); empty when the daemon sent none.
    """

    code = "remote_error"

    def __init__(self, invocation_id: str, result: Result) -> None:
        error = result.error
        self.remote_type = error.type if error else "unknown"
        self.remote_message = error.message if error else "no error was reported"
        self.traceback = error.traceback if error else ""
        super().__init__(
            invocation_id,
            result,
            f"invocation {invocation_id} failed: {self.remote_type}: {self.remote_message}",
        )
        if self.traceback:
            self.add_note("remote traceback:\n" + self.traceback.rstrip("\n"))


class JobCancelled(JobFailed):
    """The invocation was cancelled before it finished."""

    code = "job_cancelled"

    def __init__(self, invocation_id: str, result: Result) -> None:
        super().__init__(invocation_id, result, f"invocation {invocation_id} was cancelled")


class JobDropped(JobFailed):
    """The invocation was evicted from its full ``drop_oldest`` queue and never ran."""

    code = "job_dropped"

    def __init__(self, invocation_id: str, result: Result) -> None:
        super().__init__(
            invocation_id,
            result,
            f"invocation {invocation_id} was dropped from its full queue (on_full: "
            "drop_oldest) before it ran",
        )


_FAILURES: dict[str, type[JobCancelled] | type[JobDropped]] = {
    CANCELLED_TYPE: JobCancelled,
    DROPPED_TYPE: JobDropped,
}


def failure(result: Result) -> JobFailed | None:
    """The exception a finished result stands for; ``None`` if it succeeded."""
    if result.ok:
        return None
    error_type = result.error.type if result.error else ""
    return _FAILURES.get(error_type, RemoteError)(result.id, result)


def value_of(result: Result) -> Any:
    """A finished invocation's return value (``None`` for a command).

    Raises:
        JobFailed: the :func:`failure` the result stands for.
    """
    if (err := failure(result)) is not None:
        raise err
    return result.value


async def poll_result(
    client: Client,
    invocation_id: str,
    timeout_s: float | None = None,
    *,
    namespace: str | None = None,
) -> tuple[Result | Job, Any]:
    """Wait until an invocation has finished, or ``timeout_s`` has passed.

    Args:
        timeout_s: longest wait in seconds; ``None`` waits for ever, ``0`` asks once.

    Returns:
        The last answer of the result route, typed and as the server sent it: a
        :class:`Result` (finished, failed or not) or, at the timeout, the :class:`Job`.

    Raises:
        LakeshoreError: from the API (e.g. ``NotFound`` for an unknown id).
    """

    async def ask(wait_s: float) -> tuple[Result | Job, Any]:
        call = client.job_result(invocation_id, wait_s=wait_s, namespace=namespace)
        body = await call.body()
        return call.decode(body), body

    return await _long_poll(ask, timeout_s, client.timeout_s, client.failover_s)


async def _long_poll(
    ask: Callable[[float], Awaitable[tuple[Result | Job, T]]],
    timeout_s: float | None,
    request_timeout_s: float,
    outage_s: float,
) -> tuple[Result | Job, T]:
    """``ask(wait_s)`` until it answers a ``Result`` or ``timeout_s`` has passed, each wait
    shorter than the request timeout. A wait is a read: one that the control plane could not
    answer (it died holding it, or is restarting) is asked again, for ``outage_s`` at most
    from the first failure in a row."""
    clock = time.monotonic
    deadline = None if timeout_s is None else clock() + timeout_s
    # Half the request timeout leaves the server time to answer a held request.
    slice_s = min(MAX_WAIT_S, request_timeout_s / 2)
    failing_since: float | None = None
    while True:
        left = slice_s if deadline is None else max(0.0, min(slice_s, deadline - clock()))
        asked = clock()
        try:
            answer, body = await ask(left)
        except Unavailable as e:
            if isinstance(e, NotLeader) or (deadline is not None and clock() >= deadline):
                raise
            if failing_since is None:
                failing_since = clock()
                log.warning("a result wait was not answered (%s): asked again for %gs at most",
                            e.message, outage_s)  # fmt: skip
            elif clock() - failing_since >= outage_s:
                raise
            await asyncio.sleep(OUTAGE_PAUSE_S)
            continue
        failing_since = None
        if isinstance(answer, Result) or (deadline is not None and clock() >= deadline):
            return answer, body
        if (early := MIN_POLL_S - (clock() - asked)) > 0:
            # Only a server that answers before wait_s gets here; bound its request rate.
            await asyncio.sleep(early)


async def wait_result(
    client: Client,
    invocation_id: str,
    timeout_s: float | None = None,
    *,
    namespace: str | None = None,
) -> Result:
    """Wait until an invocation has finished and return its result, failed or not, over
    the client's fast path (told the moment the outcome is accepted).

    Args:
        timeout_s: longest wait in seconds; ``None`` waits for ever, ``0`` asks once.

    Raises:
        TimeoutError: it had not finished within ``timeout_s``.
        LakeshoreError: from the API (e.g. ``NotFound`` for an unknown id).
    """

    async def ask(wait_s: float) -> tuple[Result | Job, None]:
        return await client.fast.result(invocation_id, wait_s, namespace=namespace), None

    answer, _ = await _long_poll(ask, timeout_s, client.timeout_s, client.failover_s)
    if isinstance(answer, Job):
        raise TimeoutError(
            f"invocation {invocation_id} did not finish within {timeout_s:g}s "
            f"(state {answer.state}, attempt {answer.attempt})"
        )
    return answer


_log_line = msgspec.json.Decoder(LogLine)


async def stream_logs(
    client: Client,
    invocation_id: str,
    *,
    namespace: str | None = None,
    follow: bool = False,
    attempt: int | None = None,
    after: int | None = None,
    tail: int | None = None,
    stream: str | None = None,
) -> AsyncIterator[LogLine]:
    """An invocation's live log, line by line (``GET …/jobs/:id/logs``).

    Args:
        follow: go on with new output, into later attempts, until the invocation ends.
        attempt: start with this attempt (``None``: the latest, or the first to come).
        after: resume after this chunk's ``seq`` of that attempt (no gap, no repeat).
        tail: of what is stored, only the last ``tail`` lines.
        stream: ``out`` or ``err`` only.

    Yields:
        :class:`LogChunk` lines, a :class:`LogAttempt` when a follow moves on to a retry,
        and a :class:`LogEnd` last (a line of a kind this client does not know is skipped).

    Raises:
        NotFound: no such invocation in the namespace (another org's included).
        Unavailable: the answer was cut before its end line.
    """
    params: dict[str, str | int] = {"follow": "true" if follow else "false"}
    for key, value in (("attempt", attempt), ("after", after), ("tail", tail)):
        if value is not None:
            params[key] = value
    if stream is not None:
        params["stream"] = stream
    path = api_path("namespaces", namespace or client.namespace, "jobs", invocation_id, "logs")
    async for raw in client.stream_lines(path, params=params):
        try:
            line = _log_line.decode(raw)
        except msgspec.ValidationError:
            continue  # a newer server's kind of line
        yield line
        if isinstance(line, LogEnd):
            return
    raise Unavailable(f"the log of invocation {invocation_id} was cut before its end")


class Invocation:
    """A handle on one submitted invocation.

    ``udf`` functions return these; ``Invocation(id)`` re-attaches to any invocation of the
    configured namespace (see :func:`lakeshore.sdk.configure`). The synchronous methods
    block the calling thread; the ``a``-prefixed ones are their coroutine twins.

    Attributes:
        id: the invocation id.
        namespace: its namespace (``None``: the configured client's).
        queue: the queue it was submitted to, when known.
        warnings: what the server warned of at submission, e.g. ``no_members``.
    """

    __slots__ = ("id", "namespace", "queue", "warnings")

    def __init__(
        self,
        id: str,
        *,
        namespace: str | None = None,
        queue: str | None = None,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.id, self.namespace, self.queue, self.warnings = id, namespace, queue, warnings

    def __repr__(self) -> str:
        return f"Invocation(id={self.id!r}, queue={self.queue!r}, namespace={self.namespace!r})"

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the invocation to finish and return its value.

        Args:
            timeout: longest wait in seconds; ``None`` waits for ever.

        Returns:
            The function's return value as JSON builtins (``None`` for a command).

        Raises:
            TimeoutError: not finished within ``timeout``.
            RemoteError: it raised (or its command failed) on its last attempt.
            JobCancelled / JobDropped: it was cancelled, or dropped from a full queue.
        """
        return value_of(self.outcome(timeout))

    async def aresult(self, timeout: float | None = None) -> Any:
        """:meth:`result` as a coroutine."""
        return value_of(await self.aoutcome(timeout))

    def outcome(self, timeout: float | None = None) -> Result:
        """Wait like :meth:`result`, but return the whole :class:`Result`, failed or not
        (a command's ``exit_code`` and ``output`` are there)."""
        return sync.call(lambda c: self._wait(c, timeout))

    async def aoutcome(self, timeout: float | None = None) -> Result:
        """:meth:`outcome` as a coroutine."""
        return await sync.acall(lambda c: self._wait(c, timeout))

    def status(self) -> JobDetail:
        """The invocation now: state, attempt, worker, and every attempt so far."""
        return sync.call(self._show)

    async def astatus(self) -> JobDetail:
        """:meth:`status` as a coroutine."""
        return await sync.acall(self._show)

    def cancel(self) -> Job:
        """Cancel it: a pending invocation is removed, a running one is stopped by its daemon.

        Returns:
            The job as the server answered (``cancelled``, or still ``running`` while its
            daemon stops it).

        Raises:
            Conflict: it had already finished.
        """
        return sync.call(self._cancel)

    async def acancel(self) -> Job:
        """:meth:`cancel` as a coroutine."""
        return await sync.acall(self._cancel)

    def retry(self, env: dict[str, str] | None = None) -> Invocation:
        """Submit it again, as a new invocation linked to this one (it must have failed,
        been cancelled or been dropped).

        Args:
            env: the ``env`` values of a command that had some (they are kept nowhere).

        Returns:
            A handle on the new invocation.

        Raises:
            Conflict: it is in another state (the message says which).
        """
        return sync.call(lambda c: self._retry(c, env))

    async def aretry(self, env: dict[str, str] | None = None) -> Invocation:
        """:meth:`retry` as a coroutine."""
        return await sync.acall(lambda c: self._retry(c, env))

    def logs(
        self, follow: bool = False, attempt: int | None = None, after: int | None = None
    ) -> Iterator[LogLine]:
        """Its live log: what is stored, and with ``follow`` what comes until it ends.

        Args:
            follow: go on with new output, into later attempts, until it ends.
            attempt: start with this attempt (``None``: the latest, or the first to come).
            after: resume after this chunk's ``seq`` of that attempt.

        Yields:
            :class:`~lakeshore.model.logs.LogChunk` (``text``, ``stream``, ``seq``, …),
            :class:`~lakeshore.model.logs.LogAttempt` when a follow moves on to a retry,
            and :class:`~lakeshore.model.logs.LogEnd` (the state) last.
        """
        lines = _Lines(self, follow, attempt, after)
        try:
            while (line := sync.call(lines.step)) is not None:
                yield line
        finally:
            with contextlib.suppress(Exception):
                sync.call(lines.close)

    async def alogs(
        self, follow: bool = False, attempt: int | None = None, after: int | None = None
    ) -> AsyncIterator[LogLine]:
        """:meth:`logs` as an async iterator (on the SDK's loop, awaited from yours)."""
        lines = _Lines(self, follow, attempt, after)
        try:
            while (line := await sync.acall(lines.step)) is not None:
                yield line
        finally:
            with contextlib.suppress(Exception):
                await sync.acall(lines.close)

    async def _wait(self, client: Client, timeout: float | None) -> Result:
        return await wait_result(client, self.id, timeout, namespace=self.namespace)

    async def _show(self, client: Client) -> JobDetail:
        return await client.job_show(self.id, namespace=self.namespace)

    async def _cancel(self, client: Client) -> Job:
        return await client.job_cancel(self.id, namespace=self.namespace)

    async def _retry(self, client: Client, env: dict[str, str] | None) -> Invocation:
        job = await client.job_retry(self.id, env, namespace=self.namespace)
        return Invocation(job.id, namespace=self.namespace, queue=job.queue)


__all__ = [
    "Invocation",
    "JobCancelled",
    "JobDropped",
    "JobFailed",
    "RemoteError",
    "failure",
    "poll_result",
    "stream_logs",
    "value_of",
    "wait_result",
]


class _Lines:
    """A log being read on the SDK's loop, a line per :meth:`step` (the sync and async
    iterators of :meth:`Invocation.logs` drive it from their side)."""

    def __init__(
        self, inv: Invocation, follow: bool, attempt: int | None, after: int | None
    ) -> None:
        self._inv, self._args = inv, (follow, attempt, after)
        self._lines: AsyncIterator[LogLine] | None = None

    async def step(self, client: Client) -> LogLine | None:
        """The next line; ``None`` at the end."""
        if self._lines is None:
            follow, attempt, after = self._args
            inv = self._inv
            self._lines = stream_logs(
                client, inv.id, namespace=inv.namespace, follow=follow, attempt=attempt,
                after=after,
            )  # fmt: skip
        try:
            return await anext(self._lines)
        except StopAsyncIteration:
            return None

    async def close(self, client: Client) -> None:
        if self._lines is not None:
            await self._lines.aclose()  # type: ignore[attr-defined]
