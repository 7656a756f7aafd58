"""Running one invocation: a function in a worker process, or a command as a subprocess.

The runner never raises for a failing job: every failure becomes an :class:`Outcome` with
a :class:`~lakeshore.model.RemoteError`. Cancellation (a timeout, a cancel order, a drain
that ran out of time) stops the run for real (:mod:`~lakeshore.daemon.policies.stopping`):
SIGTERM to all its processes, up to its ``stop_grace_s`` for the main process to exit,
then SIGKILL; the cancellation goes on only once that is over, and the :class:`Capture`
says how it went.

A function runs in a worker process of the daemon's :class:`~lakeshore.daemon.pool.Pool`
(a crash of it is the attempt's ``lakeshore.RunCrashed``, never the daemon's), or — with
``isolation: "inline"`` — on a thread of the daemon, which cannot be stopped: a stopped
inline run goes on with its result discarded.

A command's run is over when its main process has exited: its pipes then get
:data:`~lakeshore.daemon.policies.stopping.DRAIN_S` to deliver what is left and are closed,
even if a descendant still holds them; then whatever the run left behind, in its process
group or out of it, is killed (:mod:`lakeshore.daemon.reaper`). Every run sees the job's
variables (``LAKESHORE_JOB_ID``, ``LAKESHORE_ATTEMPT``, …) and the reaper's
``LAKESHORE_RUN`` mark in its environment, over the daemon's and the invocation's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import signal
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from lakeshore.daemon.code_cache import CodeCache
from lakeshore.daemon.policies.stopping import DRAIN_S, KILL_WAIT_S, Stopped, stop
from lakeshore.daemon.pool import Pool, crash_cause, crashed_error
from lakeshore.daemon.reaper import DAEMON_MARK, RUN_MARK, RunProcesses, Watchdog, signal_marked
from lakeshore.daemon.worker_main import CODE_DIR_VAR, CODE_VAR, resolve
from lakeshore.errors import LakeshoreError, Unavailable
from lakeshore.model import Invocation, Isolation, RemoteError

log = logging.getLogger(__name__)

#: Bytes of a command's stdout kept, and as many of its stderr: the last ones of each.
TAIL_BYTES = 64 * 1024
#: The two streams of a run's output, as its live log names them.
STDOUT, STDERR = "out", "err"
#: The error type of a run whose code snapshot could not be fetched (a failed attempt).
CODE_UNAVAILABLE = "lakeshore.CodeUnavailable"
#: Gets each chunk of a run's output as it comes: ``sink(stream, chunk)``.
Sink = Callable[[str, bytes], None]


@dataclass(slots=True)
class Outcome:
    """How one run ended."""

    ok: bool
    #: the function's return value, as JSON-able builtins
    value: Any = None
    error: RemoteError | None = None
    exit_code: int | None = None
    #: the last :data:`TAIL_BYTES` of a command's stdout, decoded leniently
    output: str | None = None
    #: the last :data:`TAIL_BYTES` of a command's stderr, decoded leniently
    stderr: str | None = None
    #: the code the run ran: the digest of the function's module file
    code_version: str | None = None
    #: the run's process died instead of answering (:func:`~.pool.crash_cause`): a signal
    #: it did not get from its stop (``SIGSEGV``, the OOM killer's ``SIGKILL``), or a worker
    #: process's exit before it returned
    crashed: str | None = None
    #: it ran past its ``timeout_s`` and was stopped
    timed_out: bool = False


class _Tail:
    """The last ``limit`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        if len(self._buf) > self._limit:
            del self._buf[: len(self._buf) - self._limit]

    def text(self) -> str:
        # The cut may split a multi-byte character; "replace" keeps the rest readable.
        return self._buf.decode("utf-8", errors="replace")


class Capture:
    """A command's stdout and stderr so far (a tail of ``limit`` bytes each), its exit code
    and how it was stopped, readable after a cancelled run.

    They are kept apart so that the producer gets them back apart: ``lakeshore submit
    --wait`` prints the stdout on its stdout and the stderr on its stderr.
    """

    def __init__(self, limit: int = TAIL_BYTES, sink: Sink | None = None) -> None:
        self._out, self._err = _Tail(limit), _Tail(limit)
        #: also gets every chunk as it comes, with its stream (the live log)
        self._sink = sink
        self.exit_code: int | None = None
        #: how the command was stopped; ``None`` if it was not (or is a function)
        self.stopped: Stopped | None = None
        #: called with the grace once a stop has sent SIGTERM
        self.on_term: Callable[[float], None] | None = None

    def feed(self, chunk: bytes) -> None:
        """Add to the stdout tail."""
        self._out.feed(chunk)
        if self._sink is not None:
            self._sink(STDOUT, chunk)

    def feed_stderr(self, chunk: bytes) -> None:
        """Add to the stderr tail."""
        self._err.feed(chunk)
        if self._sink is not None:
            self._sink(STDERR, chunk)

    def text(self) -> str:
        """The stdout tail."""
        return self._out.text()

    def stderr_text(self) -> str:
        """The stderr tail."""
        return self._err.text()


def remote_error(e: BaseException) -> RemoteError:
    """An exception as the producer sees it: qualified type, message, traceback text."""
    t = type(e)
    return RemoteError(
        type=f"{t.__module__}.{t.__qualname__}",
        message=str(e),
        traceback="".join(traceback.format_exception(e)),
    )


class Runner:
    """Runs invocations.

    Args:
        base_env: the daemon's environment, under each run's.
        processes: most worker processes kept warm for functions (the concurrency).
        max_runs_per_process: runs after which a worker process is replaced (``None``:
            no limit).
        code: where the code snapshots of runs that name one are fetched and kept
            (``None``: such a run fails, saying so).
    """

    def __init__(
        self,
        base_env: Mapping[str, str],
        *,
        processes: int = 1,
        max_runs_per_process: int | None = None,
        code: CodeCache | None = None,
    ) -> None:
        self._code = code
        self._watchdog = Watchdog()
        self._watchdog.start()
        self._marks = {DAEMON_MARK: self._watchdog.mark}
        self._base_env = dict(base_env)
        self._threads = _Threads()
        self.pool = Pool(base_env, size=processes, max_runs=max_runs_per_process, marks=self._marks)

    async def close(self) -> None:
        """End the idle worker processes and the watchdog (the daemon is stopping)."""
        try:
            await self.pool.close()
        finally:
            await asyncio.to_thread(self._watchdog.close)

    async def run(
        self,
        inv: Invocation,
        capture: Capture,
        *,
        env: Mapping[str, str],
        mark: str,
        devices: Mapping[str, str] | None = None,
    ) -> Outcome:
        """Run ``inv`` to its end; cancel the awaiting task to stop it.

        Args:
            inv: a ``fn`` or ``command`` invocation.
            capture: receives a command's output as it comes, so a stopped run keeps it.
            env: what the run sees over the daemon's environment and the invocation's
                ``env`` (the job's ``LAKESHORE_JOB_ID``, ``LAKESHORE_ATTEMPT``, …).
            mark: unique to this run: its processes carry it as ``LAKESHORE_RUN``.
            devices: the run's device set (``CUDA_VISIBLE_DEVICES`` …), over the
                invocation's ``env``: a function runs in a worker process that has it
                (:mod:`~lakeshore.daemon.pool`).

        Returns:
            The outcome; failures are outcomes, not exceptions.
        """
        shipped: dict[str, str] = {}
        if inv.code is not None:
            try:
                directory = await self._code_directory(inv.code)
            except LakeshoreError as e:  # a failed attempt, never a run of local code instead
                why = f"code snapshot {inv.code} could not be fetched to this host: {e}"
                return Outcome(ok=False, error=RemoteError(type=CODE_UNAVAILABLE, message=why))
            shipped = {CODE_VAR: inv.code, CODE_DIR_VAR: str(directory)}
        devices = dict(devices or {})
        if inv.command:
            env = {**self._base_env, **inv.env, **devices, **env, **shipped, **self._marks,
                   RUN_MARK: mark}  # fmt: skip
            cwd = shipped.get(CODE_DIR_VAR)
            return await _command(inv.command, env, capture, inv.stop_grace_s, cwd=cwd)
        if inv.fn and inv.isolation is Isolation.INLINE:
            return await _in_thread(self._threads, lambda: _call(inv.fn, inv.args, inv.kwargs))
        if inv.fn:
            return await self._function(inv, capture, env, mark, shipped, devices)
        return Outcome(ok=False, error=remote_error(ValueError("neither fn nor command is set")))

    async def _code_directory(self, digest: str) -> Path:
        """The directory of a run's code snapshot, fetched to this host if need be.

        Raises:
            LakeshoreError: it could not be had (the message says why).
        """
        if self._code is None:
            raise Unavailable("this daemon keeps no code cache: it cannot run shipped code")
        return await self._code.directory(digest)

    async def _function(
        self,
        inv: Invocation,
        capture: Capture,
        env: Mapping[str, str],
        mark: str,
        shipped: Mapping[str, str],
        devices: Mapping[str, str],
    ) -> Outcome:
        assert inv.fn is not None
        try:
            done, code = await self.pool.run(
                inv.fn,
                inv.args,
                inv.kwargs,
                # Workers are kept per environment: one of a snapshot runs only its runs.
                # Its devices a worker takes from each run until CUDA pinned it to some.
                env={**inv.env, **shipped},
                run_env=env,
                mark=mark,
                grace_s=inv.stop_grace_s,
                capture=capture,
                devices=devices,
            )
        except OSError as e:  # no worker process could be started
            return Outcome(ok=False, error=remote_error(e))
        if done is None:
            error = crashed_error(code, capture.stderr_text())
            return Outcome(ok=False, error=error, crashed=crash_cause(code))
        if done.ok:
            return Outcome(ok=True, value=done.value, code_version=done.code_version)
        assert done.error is not None
        kind, message, tb = done.error
        error = RemoteError(type=kind, message=message, traceback=tb)
        return Outcome(ok=False, error=error, code_version=done.code_version)


class _Watch(asyncio.SubprocessProtocol):
    """Feeds a command's pipes to its capture as they deliver, and tells when its main
    process has exited and when both pipes have closed.

    Not ``asyncio.create_subprocess_exec``: its ``wait()`` returns only once the pipes
    have closed too (CPython 3.11.7 and 3.12 do so), which a descendant that holds them
    puts off for as long as it lives.
    """

    def __init__(self, capture: Capture) -> None:
        self._feeds = {1: capture.feed, 2: capture.feed_stderr}
        self._open = {1, 2}
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._feeds[fd](data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open:
            self.closed.set()

    def process_exited(self) -> None:
        self.exited.set()


async def _command(
    argv: list[str], env: dict[str, str], capture: Capture, grace_s: float, *, cwd: str | None
) -> Outcome:
    loop = asyncio.get_running_loop()
    watch = _Watch(capture)
    try:
        transport, _ = await loop.subprocess_exec(
            lambda: watch,
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            # Its own process group, so a signal also reaches what a shell started.
            start_new_session=True,
        )
    except OSError as e:
        return Outcome(ok=False, error=remote_error(e))
    except asyncio.CancelledError:
        # asyncio has killed the main process; what it may have started carries the mark.
        signal_marked(env[RUN_MARK], signal.SIGKILL)
        raise
    procs = RunProcesses(transport.get_pid(), env[RUN_MARK])
    try:
        try:
            await watch.exited.wait()
        except asyncio.CancelledError:
            began = loop.time()
            try:
                capture.stopped = await stop(procs.signal, watch.exited, grace_s, capture.on_term)
            except asyncio.CancelledError:  # the stop itself was cut short: SIGKILL now
                capture.stopped = Stopped(grace_s=grace_s, after_s=loop.time() - began, killed=True)
                raise
            raise
    finally:
        await _end(transport, watch, procs)
        capture.exit_code = transport.get_returncode()
    code = capture.exit_code
    output, stderr = capture.text(), capture.stderr_text()
    if code == 0:
        return Outcome(ok=True, exit_code=0, output=output, stderr=stderr)
    crashed = None
    if code is not None and code < 0:  # not by its stop: that one is a cancel or a timeout
        crashed = crash_cause(code)
        how = f"was killed by signal {-code} ({crashed})"
    else:
        how = f"exited with status {code}"
    error = RemoteError(type="subprocess.CalledProcessError", message=f"command {argv[0]!r} {how}")
    return Outcome(
        ok=False, error=error, exit_code=code, output=output, stderr=stderr, crashed=crashed
    )


async def _end(transport: asyncio.SubprocessTransport, watch: _Watch, procs: RunProcesses) -> None:
    """The main process is gone (or its stop was cut short): let the pipes deliver a moment,
    close them, and kill whatever is left of the run, also when this is cancelled in turn."""
    try:
        if not watch.exited.is_set():
            procs.signal(signal.SIGKILL)
            # Reaped by asyncio's child watcher, not by the transport's close below.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_WAIT_S):
                    await watch.exited.wait()
        with contextlib.suppress(TimeoutError):
            # A descendant that holds a pipe is killed below, its output no longer read.
            async with asyncio.timeout(DRAIN_S):
                await watch.closed.wait()
        transport.close()
        # Off the loop: a scan of /proc takes about 15 ms on a host of 1,000 processes.
        left = await asyncio.to_thread(procs.kill)
    except BaseException:
        # Cancelled meanwhile: here and now, whatever a thread did yet (twice is harmless).
        transport.close()
        procs.kill()
        raise
    if left:
        log.info("run %s: killed %d process(es) it left behind", procs.mark, left)


def _call(ref: str, args: list[Any], kwargs: dict[str, Any]) -> Outcome:
    """Runs on the worker thread: import, call, await a coroutine, make the value JSON-able."""
    try:
        value = resolve(ref)(*args, **kwargs)
        if inspect.isawaitable(value):
            # On the thread's own loop: a coroutine that blocks cannot stall the daemon's
            # loop, which keeps the leases and heartbeats going.
            value = asyncio.run(_await(value))
        return Outcome(ok=True, value=msgspec.to_builtins(value))
    except BaseException as e:  # noqa: BLE001 - the job's failure, whatever it is
        return Outcome(ok=False, error=remote_error(e))


async def _await(awaitable: Any) -> Any:
    return await awaitable


class _Threads:
    """Daemon threads for function runs, reused when idle, never capped.

    Not ``ThreadPoolExecutor``: an abandoned run (cancelled, timed out) would hold one of
    its few threads for ever, and its threads are joined at interpreter exit, so a hung
    function would keep the daemon from exiting. Starting a thread per run costs about a
    millisecond on a busy machine, so idle threads wait for the next run instead.
    """

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if spawn:
                self._count += 1
            else:
                self._idle -= 1
        self._work.put(job)
        if spawn:
            threading.Thread(
                target=self._serve, name=f"lakeshore-run-{self._count}", daemon=True
            ).start()

    def _serve(self) -> None:
        while True:
            self._work.get()()
            with self._lock:
                self._idle += 1


async def _in_thread(threads: _Threads, call: Callable[[], Outcome]) -> Outcome:
    """Run ``call`` on a function thread and await its outcome (discarded if cancelled)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Outcome] = loop.create_future()

    def settle(outcome: Outcome) -> None:
        if not done.done():  # cancelled: the result is discarded
            done.set_result(outcome)

    def job() -> None:
        outcome = call()
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:
            pass  # the loop has closed: nobody is waiting for this result any more

    threads.submit(job)
    return await done
