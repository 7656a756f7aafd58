"""Running one invocation: a function in a worker thread, or a command as a subprocess.

The runner never raises for a failing job: every failure becomes an :class:`Outcome` with
a :class:`~lakeshore.model.RemoteError`. Cancellation (a timeout, a cancel order, a drain
that ran out of time) stops the run: a command's whole process group is killed, while a
function's thread cannot be killed and runs on with its result discarded.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import queue
import signal
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from lakeshore.model import Invocation, RemoteError

#: Bytes of a command's stdout kept, and as many of its stderr: the last ones of each.
TAIL_BYTES = 64 * 1024
_READ_BYTES = 64 * 1024


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
    """A command's stdout and stderr so far (a tail of ``limit`` bytes each) and exit code,
    readable after a cancelled run.

    They are kept apart so that the producer gets them back apart: ``lakeshore submit
    --wait`` prints the stdout on its stdout and the stderr on its stderr.
    """

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self._out, self._err = _Tail(limit), _Tail(limit)
        self.exit_code: int | None = None

    def feed(self, chunk: bytes) -> None:
        """Add to the stdout tail."""
        self._out.feed(chunk)

    def feed_stderr(self, chunk: bytes) -> None:
        """Add to the stderr tail."""
        self._err.feed(chunk)

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
    """Runs invocations. ``base_env`` is the daemon's environment, under each command's."""

    def __init__(self, base_env: Mapping[str, str]) -> None:
        self._base_env = dict(base_env)
        self._threads = _Threads()

    async def run(self, inv: Invocation, capture: Capture) -> Outcome:
        """Run ``inv`` to its end; cancel the awaiting task to stop it.

        Args:
            inv: a ``fn`` or ``command`` invocation.
            capture: receives a command's output as it comes, so a stopped run keeps it.

        Returns:
            The outcome; failures are outcomes, not exceptions.
        """
        if inv.command:
            return await self._command(inv.command, {**self._base_env, **inv.env}, capture)
        if inv.fn:
            return await _in_thread(self._threads, lambda: _call(inv.fn, inv.args, inv.kwargs))
        return Outcome(ok=False, error=remote_error(ValueError("neither fn nor command is set")))

    async def _command(self, argv: list[str], env: dict[str, str], capture: Capture) -> Outcome:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                # Its own process group, so a kill also reaches what a shell started.
                start_new_session=True,
            )
        except OSError as e:
            return Outcome(ok=False, error=remote_error(e))
        try:
            assert proc.stdout is not None and proc.stderr is not None
            # Both at once: a command blocked writing one full pipe never closes the other.
            await asyncio.gather(
                _pump(proc.stdout, capture.feed), _pump(proc.stderr, capture.feed_stderr)
            )
            code = await proc.wait()
        finally:
            if proc.returncode is None:
                _kill_group(proc.pid)
                await proc.wait()
            capture.exit_code = proc.returncode
        output, stderr = capture.text(), capture.stderr_text()
        if code == 0:
            return Outcome(ok=True, exit_code=0, output=output, stderr=stderr)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        error = RemoteError(
            type="subprocess.CalledProcessError", message=f"command {argv[0]!r} {how}"
        )
        return Outcome(ok=False, error=error, exit_code=code, output=output, stderr=stderr)


async def _pump(stream: asyncio.StreamReader, feed: Callable[[bytes], None]) -> None:
    """Feed a pipe's bytes on until the command closes it."""
    while chunk := await stream.read(_READ_BYTES):
        feed(chunk)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone


def resolve(ref: str) -> Callable[..., Any]:
    """Import ``module:qualname`` and return the object it names.

    Raises:
        ValueError: ``ref`` has no ``:``.
        ImportError / AttributeError: the module or a name in it does not exist.
    """
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"fn {ref!r} is not of the form 'module:qualname'")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


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
