"""Routes of invocations: submitting them, then reading, awaiting and cancelling them as jobs."""

from __future__ import annotations

from typing import Any

from lakeshore.model import (
    InvocationSubmit,
    Job,
    JobDetail,
    JobList,
    Result,
    RetryRequest,
    SubmitAnswer,
    SubmitBatch,
)
from lakeshore.sdk.call import Call
from lakeshore.sdk.transport import Transport


class _ResultCall(Call["Result | Job"]):
    """The result route answers two shapes: a finished ``Result`` (which always carries
    ``ok``) or, while unfinished, the ``Job`` (which never does)."""

    __slots__ = ()

    def decode(self, body: Any) -> Result | Job:
        finished = not isinstance(body, dict) or "ok" in body
        shape: Call[Any] = Call(self._client, Result if finished else Job, self.method, self.path)
        return shape.decode(body)


def _listing(
    queue: str | None, state: str | None, limit: int | None, after: str | None
) -> dict[str, str | int] | None:
    given = {"queue": queue, "state": state, "limit": limit, "after": after}
    return {k: v for k, v in given.items() if v is not None} or None


class JobRoutes(Transport):
    """Invocations: the submit route and the jobs it creates."""

    def submit(
        self,
        queue: str,
        invocations: InvocationSubmit | list[InvocationSubmit],
        *,
        wait_s: float | None = None,
        namespace: str | None = None,
    ) -> Call[SubmitAnswer]:
        """Submit one invocation or a batch (at most 10,000); the answer has the ids.

        Args:
            wait_s: how long a ``block`` queue may wait for room, in seconds.
        """
        body: Any = (
            SubmitBatch(invocations=invocations) if isinstance(invocations, list) else invocations
        )
        params: dict[str, str | int] | None = (
            {"wait_s": str(wait_s)} if wait_s is not None else None
        )
        path = self._ns(namespace, "queues", queue, "invocations")
        return Call(self, SubmitAnswer, "POST", path, json=body, params=params)

    def jobs_ls(
        self,
        queue: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[list[Job]]:
        """Invocations of the namespace, newest first.

        Args:
            queue: only this queue's.
            state: only those in this state (``pending``, ``running``, ``succeeded``, …).
            limit: at most this many, 1–1000 (the server's default is 100).
            after: the last id of the previous page, to read the next one.
        """
        params = _listing(queue, state, limit, after)
        return Call(self, list[Job], "GET", self._ns(namespace, "jobs"), key="jobs", params=params)

    def jobs_page(
        self,
        queue: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        *,
        namespace: str | None = None,
    ) -> Call[JobList]:
        """:meth:`jobs_ls` with the batches the listed jobs came in, each counted whole."""
        params = _listing(queue, state, limit, after)
        return Call(self, JobList, "GET", self._ns(namespace, "jobs"), params=params)

    def job_show(self, job_id: str, *, namespace: str | None = None) -> Call[JobDetail]:
        """One invocation with its attempts."""
        return Call(self, JobDetail, "GET", self._ns(namespace, "jobs", job_id))

    def job_result(
        self, job_id: str, wait_s: float | None = None, *, namespace: str | None = None
    ) -> Call[Result | Job]:
        """An invocation's outcome: a :class:`Result` once finished, else its :class:`Job`.

        A cancelled or dropped invocation has finished: its ``Result`` has ``ok`` false and
        the error type ``lakeshore.Cancelled`` or ``lakeshore.Dropped``. A ``Job`` answer
        (HTTP 202) means it had not finished when ``wait_s`` ran out.

        Args:
            wait_s: how long the server may hold the request for the invocation to finish,
                0–600 seconds (server default 0). Keep it below the client's ``timeout_s``.
        """
        params: dict[str, str | int] | None = (
            {"wait_s": f"{wait_s:.3f}"} if wait_s is not None else None
        )
        path = self._ns(namespace, "jobs", job_id, "result")
        return _ResultCall(self, Result, "GET", path, params=params)

    def job_cancel(self, job_id: str, *, namespace: str | None = None) -> Call[Job]:
        """Cancel an invocation: a pending one is removed (state ``cancelled``), a running
        one's daemon is told to stop it (the answer still shows ``running``).

        Raises:
            Conflict: the invocation had already finished.
        """
        return Call(self, Job, "POST", self._ns(namespace, "jobs", job_id, "cancel"))

    def job_retry(
        self, job_id: str, env: dict[str, str] | None = None, *, namespace: str | None = None
    ) -> Call[Job]:
        """Retry a failed, cancelled or dropped invocation: its body is submitted again to
        its queue as a new job whose ``retry_of`` is ``job_id`` (the old one's
        ``retried_by`` lists it).

        Args:
            env: the ``env`` values of a command that had some (they are kept nowhere, so
                they are given again; a missing key is refused).

        Raises:
            Conflict: it has not finished that way (its state is in the message).
            Invalid: ``env`` lacks a key the command had.
        """
        path = self._ns(namespace, "jobs", job_id, "retry")
        return Call(self, Job, "POST", path, json=RetryRequest(env=env))


__all__ = ["JobRoutes"]
