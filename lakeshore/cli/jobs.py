"""``lakeshore jobs``: list, inspect, wait for, cancel and retry invocations, read their logs.

``jobs result`` prints what ``submit --wait`` prints: a command's output (its stdout on
stdout, its stderr on stderr), or a function's value as JSON. It exits 1, with the error
on stderr, when the invocation failed, was cancelled or dropped, or had not finished when
``--wait`` ran out.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from lakeshore.cli import output, watch
from lakeshore.cli.context import LakeshoreGroup, run, settings
from lakeshore.cli.options import key_values
from lakeshore.cli.params import QUEUE_NAME
from lakeshore.cli.progress import Progress
from lakeshore.cli.tracebacks import folded
from lakeshore.errors import LakeshoreError
from lakeshore.model import (
    Attempt,
    Cause,
    InvocationState,
    Job,
    JobDetail,
    JobList,
    Result,
    describe_request,
)
from lakeshore.model.logs import LogAttempt, LogChunk, LogEnd
from lakeshore.sdk import Client
from lakeshore.sdk.invocation import RemoteError, failure, poll_result, stream_logs

#: Longest single wait of ``result --wait`` between two looks at the state, in seconds.
PROGRESS_SLICE_S = 5.0

JOB_COLUMNS = ("ID", "QUEUE", "STATE", "ATTEMPT", "WORKER", "DURATION", "WHAT", "SUBMITTED",
               "PENDING_REASON")  # fmt: skip
ATTEMPT_COLUMNS = ("ATTEMPT", "WORKER", "SEQ", "EPOCH", "STARTED", "ENDED", "OUTCOME", "ERROR")
#: The WHAT column shows a command's argv joined, cut to about this many characters.
WHAT_CHARS = 40


def _attempt(job: Job) -> str:
    return f"{job.attempt}/{job.max_attempts}"


def _worker(job: Job) -> str | None:
    """The worker as people know it: its name, or its id once its row is gone."""
    return job.worker_name or job.worker


def _what(job: Job) -> str | None:
    """What it runs: the function, or the command's argv joined and shortened."""
    if job.command is None:
        return job.fn
    text = shlex.join(job.command)
    return text if len(text) <= WHAT_CHARS else text[: WHAT_CHARS - 1] + "…"


def _duration(job: Job, now: datetime) -> str | None:
    """Running: for how long so far; finished: from its start to its end; else nothing."""
    if job.started_at is None:
        return None
    if job.finished_at is not None:
        return output.duration((job.finished_at - job.started_at).total_seconds())
    if job.state == InvocationState.RUNNING:
        return output.duration((now - job.started_at).total_seconds())
    return None


def jobs_table(rows: list[Job]) -> str:
    """``jobs ls``: one line per invocation; WORKER is the worker's name (its id when the
    worker's row is gone; ``-o json`` has both), WHAT the function or the command
    (shortened), DURATION how long it ran (running: so far)."""
    at = datetime.now(UTC)
    return output.table(
        JOB_COLUMNS,
        (
            (j.id, j.queue, _state(j), _attempt(j), _worker(j), _duration(j, at), _what(j),
             j.submitted_at, j.pending_reason)
            for j in rows
        ),
    )  # fmt: skip


def _state(job: Job) -> str:
    """``failed (timed_out)``: a failed job's cause, when it has one."""
    return f"{job.state} ({job.cause})" if job.cause is not None else str(job.state)


def jobs_listing(page: JobList) -> str:
    """``jobs ls``: :func:`jobs_table`, then a line for each batch the jobs came in, counted
    whole (``batch ID: 200 — 198 succeeded, 2 failed``)."""
    lines = [jobs_table(page.jobs)]
    for b in page.batches:
        states = ", ".join(f"{n} {state}" for state, n in _by_count(b.states))
        lines.append(f"batch {b.id}: {b.size} — {states}")
    return "\n".join(lines)


def _by_count(states: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(states.items(), key=lambda item: (-item[1], item[0]))


def job_block(job: Job) -> str:
    """``jobs show`` / ``jobs cancel``: the row as ``key: value``, then its attempts."""
    pairs = msgspec.structs.asdict(job)
    attempts, stale = pairs.pop("attempts", None), pairs.pop("stale", None)
    counted = pairs.pop("counted_attempts", None)
    if (error := pairs.pop("error")) is not None:
        pairs["error"] = _error(error)
    if not pairs.get("retried_by", True):
        del pairs["retried_by"]
    if pairs.get("stopping", "") is None:
        del pairs["stopping"]  # only while a stop runs
    for key in ("isolation", "cancelled_by", "code", "resources"):  # a function's; …
        if pairs.get(key, "") is None:
            del pairs[key]
    if job.resources is not None:
        pairs["resources"] = describe_request(job.resources)
    text = output.block(pairs.items())
    if attempts is None:
        return text
    lines = [text, f"stale completions: {stale}"] if stale else [text]
    if attempts:  # a preempted or lost attempt does not count
        lines.append(f"counted toward max_attempts: {counted} of {job.max_attempts}")
    if not attempts:
        return "\n".join([*lines, "attempts: (none)"])
    shipped = any(a.code for a in attempts)  # the CODE column: when a snapshot ran
    table = output.table(
        (*ATTEMPT_COLUMNS[:-1], *(["CODE"] if shipped else []), ATTEMPT_COLUMNS[-1]),
        (
            (
                a.attempt,
                a.worker_name or a.worker,
                a.seq,
                a.epoch,
                a.started_at,
                a.ended_at,
                _outcome(a),
                *([short_digest(a.code)] if shipped else []),
                a.error and _error(a.error),
            )
            for a in attempts
        ),
    )
    return "\n".join([*lines, f"attempts: {len(attempts)}", _indent(table)])


def short_digest(digest: str | None) -> str | None:
    """``sha256:0123456789ab`` — a snapshot's digest cut to 12 hex digits, as tables show it."""
    return digest[: len("sha256:") + 12] if digest else None


def _outcome(a: Attempt) -> str:
    """``crashed (SIGSEGV)``, ``timed_out (SIGKILL)`` when SIGKILL was needed."""
    if a.signal is not None:
        return f"{a.outcome} ({a.signal})"
    return f"{a.outcome} (SIGKILL)" if a.killed else a.outcome


def _error(error: Any) -> str:
    return f"{error.type}: {error.message}"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.split("\n"))


def show_result(answer: Result | Job, body: Any, fmt: str, *, printed: bool = False) -> None:
    """Print a result-route answer; raise so the command exits 1 unless it succeeded.

    ``table`` prints a command's stdout as it is on stdout and its stderr on stderr (a
    result stored before the two were kept apart has only ``output``, both interleaved:
    printed on stdout), and a function's value as JSON; a failure's remote traceback goes
    to stderr before the ``error:`` line.

    Args:
        printed: its output was printed already (as it came, ``submit --wait``).

    Raises:
        LakeshoreError: the invocation failed, was cancelled or dropped, or is unfinished.
    """
    if fmt != "table":
        output.emit(fmt, body, lambda: "")
    if isinstance(answer, Job):
        reason = f" ({answer.pending_reason})" if answer.pending_reason else ""
        # Lost and preempted attempts do not count: "attempt 2 of 1" would read as a bug.
        counted = getattr(answer, "counted_attempts", None)
        tally = f" ({counted} of {answer.max_attempts} counted)" if counted is not None else ""
        raise LakeshoreError(
            f"invocation {answer.id} has not finished: it is {answer.state}{reason}, "
            f"attempt {answer.attempt}{tally}; wait with "
            f"`lakeshore jobs result {answer.id} --wait SECONDS`"
        )
    if fmt == "table" and not printed:
        if answer.output is not None:
            _echo_tail(answer.output, err=False)
            if answer.stderr:
                _echo_tail(answer.stderr, err=True)
        elif answer.ok:
            click.echo(json.dumps(answer.value, indent=2, ensure_ascii=False))
    err = failure(answer)
    if err is None:
        return
    if isinstance(err, RemoteError) and err.traceback and fmt == "table":
        click.echo(folded(err.traceback), err=True)
    raise err


def _echo_tail(text: str, *, err: bool) -> None:
    """A command's output as it was written, ended by a newline unless it is empty."""
    click.echo(text, nl=bool(text) and not text.endswith("\n"), err=err)


def fetch_result(invocation_id: str, wait_s: float) -> None:
    """Wait up to ``wait_s`` for an invocation's result and print it (see :func:`show_result`)."""
    conf = settings()

    async def fetch() -> tuple[Result | Job, Any]:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            if not wait_s:
                return await poll_result(client, invocation_id, wait_s)
            return await wait_showing_progress(client, invocation_id, wait_s)

    answer, body = asyncio.run(fetch())
    show_result(answer, body, conf.output or "table")


async def wait_showing_progress(
    client: Client, invocation_id: str, wait_s: float
) -> tuple[Result | Job, Any]:
    """:func:`poll_result` in slices of :data:`PROGRESS_SLICE_S`, showing the invocation's
    state on stderr whenever it changes (``ID: running, attempt 1/3``).

    The first look does not wait, so the state shows at once.
    """
    deadline = time.monotonic() + wait_s
    slice_s = 0.0
    with Progress() as progress:
        while True:
            left = max(0.0, deadline - time.monotonic())
            answer, body = await poll_result(client, invocation_id, min(slice_s, left))
            if isinstance(answer, Result) or left <= slice_s:
                return answer, body
            progress.show(_waiting(answer))
            slice_s = PROGRESS_SLICE_S


def _waiting(job: Job) -> str:
    reason = f" ({job.pending_reason})" if job.pending_reason else ""
    return f"{job.id}: {job.state}, attempt {_attempt(job)}{reason}"


@click.group(cls=LakeshoreGroup)
def jobs() -> None:
    """Jobs: submitted invocations, their attempts and results.

    States: pending, running, succeeded, failed, cancelled, dropped. A failed job whose
    last attempt ran past its timeout or whose process crashed shows it: ``failed
    (timed_out)``, ``failed (crashed)``; ``jobs ls --state timed_out`` lists those.
    """


@jobs.command("ls")
@click.option("--queue", "-q", metavar="Q", type=QUEUE_NAME, help="Only this queue's invocations.")
@click.option(
    "--state",
    type=click.Choice([s.value for s in InvocationState] + [c.value for c in Cause]),
    help="Only in this state (timed_out, crashed: failed jobs that ended so).",
)
@click.option("--limit", type=click.IntRange(1, 1000), help="Most to show (default 100).")
@click.option("--after", metavar="ID", help="Start after this id (the last of the previous page).")
@watch.option
def ls(queue: str | None, state: str | None, limit: int | None, after: str | None) -> None:
    """List invocations, newest first."""
    watch.run(
        lambda c: c.jobs_page(queue=queue, state=state, limit=limit, after=after), jobs_listing
    )


@jobs.command("show")
@click.argument("job_id", metavar="ID")
def show(job_id: str) -> None:
    """Show one invocation and its attempts."""
    run(lambda c: c.job_show(job_id), job_block)


@jobs.command("result")
@click.argument("job_id", metavar="ID")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=0,
    metavar="S",
    help="Wait up to S seconds for it to finish (default: answer at once).",
)
def result(job_id: str, wait_s: float) -> None:
    """Print an invocation's result: a command's output or a function's value.

    Exits 1 if it failed, was cancelled or dropped, or has not finished.
    """
    fetch_result(job_id, wait_s)


@jobs.command("cancel")
@click.argument("job_id", metavar="ID")
def cancel(job_id: str) -> None:
    """Cancel an invocation.

    A pending one is removed at once; a running one is stopped by its daemon.
    """
    run(lambda c: c.job_cancel(job_id), cancel_message)


@jobs.command("retry")
@click.argument("job_id", metavar="ID")
@click.option(
    "--env", multiple=True, metavar="KEY=VALUE",
    help="A value of the command's env, given again (values are kept nowhere); repeatable.",
)  # fmt: skip
def retry(job_id: str, env: tuple[str, ...]) -> None:
    """Retry a failed, cancelled or dropped invocation.

    Its function or command, arguments, priority, timeout and attempts are submitted again
    to its queue as a new invocation: `jobs show` links the two (retry_of, retried_by).
    """
    given = key_values(env, param_hint="--env", secret=True) if env else None
    run(lambda c: c.job_retry(job_id, given), lambda j: f"retried {job_id} as {j.id}")


@jobs.command("logs")
@click.argument("job_id", metavar="ID")
@click.option(
    "--follow", "-f", is_flag=True,
    help="Go on with new output, into retries, until the job ends; exit 0 if it succeeded, "
    "1 otherwise. Ctrl-C detaches (the job goes on).",
)  # fmt: skip
@click.option("--attempt", type=click.IntRange(min=1), metavar="N", help="Start with attempt N.")
@click.option("--tail", type=click.IntRange(min=0), metavar="N", help="Only the last N lines.")
@click.option("--stdout", "only", flag_value="out", help="Only the job's stdout.")
@click.option("--stderr", "only", flag_value="err", help="Only the job's stderr.")
def logs(
    job_id: str, follow: bool, attempt: int | None, tail: int | None, only: str | None
) -> None:
    """Print a job's output: its stdout on stdout, its stderr on stderr, as it was written.

    Without -f: what is stored (of the latest attempt, or --attempt N), then exit.
    """
    end = follow_logs(job_id, follow=follow, attempt=attempt, tail=tail, stream=only)
    if follow and end.state != InvocationState.SUCCEEDED:
        raise LakeshoreError(f"invocation {job_id} ended {end.state} (attempt {end.attempt})")


def follow_logs(
    job_id: str,
    *,
    follow: bool,
    attempt: int | None = None,
    tail: int | None = None,
    stream: str | None = None,
    namespace: str | None = None,
) -> LogEnd:
    """Print an invocation's log as it comes (see ``jobs logs``); the end line it ended with.

    Ctrl-C leaves at once (exit 130): the job itself goes on.
    """
    conf = settings()

    async def read() -> LogEnd:
        async with Client(conf.api, conf.token, conf.namespace) as client:
            return await print_log(
                client, job_id, namespace=namespace, follow=follow, attempt=attempt, tail=tail,
                stream=stream,
            )  # fmt: skip

    try:
        return asyncio.run(read())
    except KeyboardInterrupt:
        click.echo(f"\n[lakeshore] detached; invocation {job_id} goes on", err=True)
        raise SystemExit(130) from None


async def print_log(
    client: Client, job_id: str, *, ended_lines: bool = False, **asked: Any
) -> LogEnd:
    """Print an invocation's log as it comes: chunks raw (stdout's on stdout, stderr's on
    stderr), a move to a retry as a note on stderr; the end line it ended with.

    Args:
        ended_lines: end each stream's output with a newline if it printed any without
            one (as :func:`show_result` prints a result's output).
        asked: :func:`~lakeshore.sdk.invocation.stream_logs`'s options.
    """
    last = {"out": "", "err": ""}
    async for line in stream_logs(client, job_id, **asked):
        match line:
            case LogChunk(text=text, stream=which):
                click.echo(text, nl=False, err=which == "err")
                last[which] = text[-1:] or last[which]
            case LogAttempt(attempt=n, previous=before):
                click.echo(f"[lakeshore] attempt {before} is over; following attempt {n}", err=True)
            case LogEnd():
                if ended_lines:
                    for which, char in last.items():
                        if char not in ("", "\n"):
                            click.echo("", err=which == "err")
                return line
    raise AssertionError("stream_logs ends with its end line")  # pragma: no cover


def cancel_message(job: Job | JobDetail) -> str:
    if job.state == InvocationState.CANCELLED:
        return f"cancelled {job.id}"
    return f"cancelling {job.id}: its daemon {_worker(job) or '?'} is told to stop it"


__all__ = [
    "cancel_message",
    "fetch_result",
    "follow_logs",
    "job_block",
    "jobs",
    "jobs_listing",
    "jobs_table",
    "print_log",
    "show_result",
]
