"""Worker processes: each function run happens in one, never on the daemon.

A worker process (:mod:`lakeshore.daemon.worker_main`) is a Python child of the daemon in
a process group of its own. It imports the function, calls it, answers, and waits for the
next run. The pool keeps at most ``size`` of them (the daemon's ``concurrency``) and gives
a run an idle one started with the same environment (the invocation's ``env``); otherwise
the run waits for the first of that environment to free or start, and the pool starts
one (first ending an idle one of another environment when it is full) when that is the
right thing (:mod:`~lakeshore.daemon.pool_growth`): a daemon of small runs keeps about
one worker per core, one of longer runs one per run.

A worker process is not reused after it crashed, was stopped, answered that a module it
imported has changed on disk (the run goes to a fresh worker, so an edited module is
imported again), or ran ``max_runs`` runs.

A worker's stdout and stderr during runs are two pipes made when it starts, read by the
daemon for as long as it lives and fed to the current run's capture. A worker answers
only after it has flushed, and the daemon then reads what the pipes hold before the run
is over: what a run printed is the run's alone, all of it, and costs no pipes of its own.
A run whose processes outlive it (they hold the pipes) retires its worker: what they print
goes to that run for at most :data:`~lakeshore.daemon.policies.stopping.DRAIN_S`, then
whatever carries the run's ``LAKESHORE_RUN`` mark is killed
(:mod:`lakeshore.daemon.reaper`), the worker itself aside, and the worker is ended.

Stopping a run (a cancel, its timeout, its daemon stopping) is a command's stop
(:func:`~lakeshore.daemon.policies.stopping.stop`) of the worker's process group and the
run's marked processes: SIGTERM, which the worker turns into ``RunStopped`` raised in the
function, the grace, SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections import deque
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from lakeshore.daemon import pool_growth, worker_main
from lakeshore.daemon.policies.stopping import DRAIN_S, KILL_WAIT_S, Stopped, stop
from lakeshore.daemon.pool_growth import Ewma
from lakeshore.daemon.reaper import RUN_MARK, RunProcesses
from lakeshore.daemon.worker_main import Call, Done, Stale
from lakeshore.model import RemoteError

if TYPE_CHECKING:
    from lakeshore.daemon.runner import Capture

log = logging.getLogger(__name__)

#: The error type of a run whose process died (a signal, ``os._exit``, the OOM killer).
CRASHED_TYPE = "lakeshore.RunCrashed"
#: Lines of a crashed run's stderr its error quotes.
CRASH_LINES = 20
#: Longest wait for a worker to exit when the pool closes (seconds), before SIGKILL.
CLOSE_WAIT_S = 2.0
#: How long a worker start is taken to last before one was timed (seconds).
START_S = 0.1
#: Longest wait for a started worker to say it is ready (seconds): an interpreter's start
#: on a loaded machine, not the user's imports (they happen in the first run).
READY_TIMEOUT_S = 60.0
#: Most bytes read from a worker's pipe at once.
_READ_BYTES = 1 << 16
#: Most characters logged of what a worker writes between runs.
_STRAY_CHARS = 500
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
#: Starts a worker: the source under its own file name (tracebacks), as ``__main__``.
_BOOT = (
    "import sys; p = sys.argv[1]; g = sys.modules['__main__'].__dict__; g['__file__'] = p; "
    "exec(compile(open(p).read(), p, 'exec'), g)"
)


class _Exit(asyncio.SubprocessProtocol):
    def __init__(self) -> None:
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        self.exited.set()


class _Output:
    """A worker's stdout and stderr pipes (the read ends), fed to the current run's
    capture; what comes between runs goes to the daemon's log."""

    def __init__(self, pid: int, out_r: int, err_r: int) -> None:
        self._pid = pid
        self._open = {out_r: True, err_r: True}
        self._out, self._err = out_r, err_r
        self.capture: Capture | None = None
        self.closed = asyncio.Event()
        loop = asyncio.get_running_loop()
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._read, fd)

    def _read(self, fd: int) -> bool:
        """Take what ``fd`` holds now; whether it has more (``False`` at its end)."""
        try:
            data = os.read(fd, _READ_BYTES)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._close(fd)
            return False
        if self.capture is None:
            log.info("worker %d, between runs: %r", self._pid, data[:_STRAY_CHARS])
        elif fd == self._out:
            self.capture.feed(data)
        else:
            self.capture.feed_stderr(data)
        return len(data) == _READ_BYTES

    def drain(self) -> None:
        """Take everything the pipes hold now."""
        for fd in (self._out, self._err):
            while self._open.get(fd) and self._read(fd):
                pass

    def _close(self, fd: int) -> None:
        if self._open.pop(fd, None) is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)
        if not self._open:
            self.closed.set()

    def close(self) -> None:
        for fd in list(self._open):
            self._close(fd)


class _Answers(asyncio.Protocol):
    """The worker's end of the socket, read for as long as it lives: its frames, one
    awaited at a time."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._waiter: asyncio.Future[worker_main.Frame | None] | None = None
        self._frames: list[worker_main.Frame] = []
        self._lost = False

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while len(self._buf) >= worker_main.HEADER.size:
            (size,) = worker_main.HEADER.unpack_from(self._buf)
            end = worker_main.HEADER.size + size
            if len(self._buf) < end:
                break
            frame = worker_main.decode(bytes(self._buf[worker_main.HEADER.size : end]))
            del self._buf[:end]
            self._frames.append(frame)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done() and (self._frames or self._lost):
            self._waiter.set_result(self._frames.pop(0) if self._frames else None)

    async def next(self) -> worker_main.Frame | None:
        """The next frame; ``None`` once the worker has closed its end (or died)."""
        if self._frames:
            return self._frames.pop(0)
        if self._lost:
            return None
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            return await self._waiter
        finally:
            self._waiter = None


class WorkerProcess:
    """One worker process: its socket to the daemon, its exit, how many runs it did."""

    def __init__(
        self,
        transport: asyncio.SubprocessTransport,
        exit_: _Exit,
        output: _Output,
        key: tuple[tuple[str, str], ...],
    ) -> None:
        self._transport, self._exit = transport, exit_
        self.output = output
        self._answers = _Answers()
        self._channel: asyncio.BaseTransport | None = None
        self.key = key
        self.pid = transport.get_pid()
        self.runs = 0
        #: still fit for another run
        self.healthy = True

    async def connect(self, sock: socket.socket, timeout_s: float) -> None:
        """Read ``sock`` from now on and wait for the worker's ``Ready``.

        Raises:
            OSError: it exited (or said something else) first, or not within ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        self._channel, _ = await loop.create_unix_connection(lambda: self._answers, sock=sock)
        try:
            async with asyncio.timeout(timeout_s):
                ready = await self._answers.next()
        except TimeoutError:
            ready = None
        if not isinstance(ready, worker_main.Ready):
            code = self.returncode
            why = f"exited with status {code}" if code is not None else "did not answer"
            raise OSError(
                f"a worker process {why} before it was ready (within {timeout_s:g} s); "
                "what it said is in the daemon's log"
            )

    @property
    def exited(self) -> asyncio.Event:
        return self._exit.exited

    @property
    def returncode(self) -> int | None:
        return self._transport.get_returncode()

    async def call(self, call: Call, capture: Capture) -> Done | Stale | None:
        """Send ``call``, its output to ``capture``; its answer, or ``None`` when the worker
        died (or closed its end) first."""
        assert self._channel is not None
        self.runs += 1
        self.output.capture = capture
        self._channel.write(worker_main.encode(call))  # type: ignore[attr-defined]
        answer = await self._answers.next()
        return answer if isinstance(answer, (Done, Stale)) else None

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    async def close(self) -> None:
        """End it: its socket closed (it exits when it reads that), SIGTERM if it lingers,
        SIGKILL after :data:`CLOSE_WAIT_S`; its group is killed either way."""
        self.healthy = False
        if self._channel is not None:
            self._channel.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S / 2):
                await self.exited.wait()
        if not self.exited.is_set():
            self.signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_WAIT_S / 2):
                    await self.exited.wait()
        self.signal(signal.SIGKILL)
        self._transport.close()
        self.output.close()


class Pool:
    """The daemon's worker processes.

    A run takes an idle worker of its environment; if there is none, it waits for one, and
    the pool starts another (within ``size``) only when that would reach the run sooner
    than a busy one (:mod:`~lakeshore.daemon.pool_growth`); the waiting runs are served in
    order, by whichever worker frees or starts first.

    Args:
        base_env: the daemon's environment, under each worker's.
        marks: variables every worker carries over the invocation's ``env`` (the
            daemon's :class:`~lakeshore.daemon.reaper.Watchdog` mark).
        size: most worker processes kept (the daemon's ``concurrency``).
        max_runs: runs after which a worker is replaced; ``None``: no limit.
    """

    def __init__(
        self,
        base_env: Mapping[str, str],
        *,
        size: int,
        max_runs: int | None,
        marks: Mapping[str, str] | None = None,
    ) -> None:
        self._base_env = dict(base_env)
        self._marks = dict(marks or {})
        self._size, self._max_runs = size, max_runs
        self._idle: list[WorkerProcess] = []
        #: busy workers and when their run began (loop time)
        self._busy: dict[WorkerProcess, float] = {}
        #: workers being started, per environment: when each start began
        self._starting: dict[tuple[tuple[str, str], ...], list[float]] = {}
        self._waiting: deque[tuple[tuple[tuple[str, str], ...], asyncio.Future[WorkerProcess]]]
        self._waiting = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._run_s = Ewma()
        self._start_s = Ewma(initial=START_S)
        self._closed = False

    @property
    def processes(self) -> list[int]:
        """The pids of the live worker processes, idle and busy."""
        return [w.pid for w in [*self._idle, *self._busy] if not w.exited.is_set()]

    async def run(
        self,
        ref: str,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        env: Mapping[str, str],
        run_env: Mapping[str, str],
        mark: str,
        grace_s: float,
        capture: Capture,
    ) -> tuple[Done | None, int | None]:
        """Run one function call on a worker; cancel the awaiting task to stop it.

        Args:
            env: the invocation's ``env`` (workers are shared by runs with the same one).
            run_env: this run's own variables (its ids, attempt; the mark is added).
            mark: the run's ``LAKESHORE_RUN`` value.
            grace_s: the run's ``stop_grace_s``.
            capture: gets the run's output as it comes, and how it was stopped.

        Returns:
            The worker's answer and, when it died instead (``None``), its exit status
            (negative: the signal).

        Raises:
            OSError: no worker process could be started.
        """
        call = Call(fn=ref, args=args, kwargs=kwargs, env={**run_env, RUN_MARK: mark})
        key = tuple(sorted(env.items()))
        while True:
            worker = await self._take(key)
            answer = await self._run_on(worker, call, mark, grace_s, capture)
            if isinstance(answer, Stale):
                log.info("worker %d: %s changed; a new worker runs %s", worker.pid, answer.path,
                         ref)  # fmt: skip
                continue
            return answer, worker.returncode if answer is None else None

    async def _run_on(
        self, worker: WorkerProcess, call: Call, mark: str, grace_s: float, capture: Capture
    ) -> Done | Stale | None:
        loop = asyncio.get_running_loop()
        procs = RunProcesses(worker.pid, mark)
        answer: Done | Stale | None = None
        try:
            answer = await worker.call(call, capture)
            if answer is None:  # it died: let the kernel finish with it
                worker.healthy = False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(KILL_WAIT_S):
                        await worker.exited.wait()
            return answer
        except asyncio.CancelledError:
            worker.healthy = False
            began = loop.time()
            try:
                capture.stopped = await stop(procs.signal, worker.exited, grace_s, capture.on_term)
            except asyncio.CancelledError:
                capture.stopped = Stopped(grace_s=grace_s, after_s=loop.time() - began, killed=True)
                raise
            raise
        finally:
            await self._end(worker, answer, procs)

    async def _end(
        self, worker: WorkerProcess, answer: Done | Stale | None, procs: RunProcesses
    ) -> None:
        """The run is over: its output is taken, its leftovers are killed, and the worker
        goes back to the pool or is ended."""
        output = worker.output
        try:
            if isinstance(answer, Done):
                self._run_s.add(answer.run_s)
            # Flushed before it answered: what the run wrote is in the pipes now.
            output.drain()
            left = answer is None or (isinstance(answer, Done) and answer.left)
            healthy = isinstance(answer, Done) and not left and worker.healthy
            if healthy and (self._max_runs is None or worker.runs < self._max_runs):
                output.capture = None
                self._give_back(worker)
                return
            self._busy.pop(worker, None)
            if left:  # its processes (or a dying worker's) may still write for a moment
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(DRAIN_S):
                        await output.closed.wait()
                output.drain()
            output.capture = None
            await asyncio.to_thread(procs.kill, group=not worker.exited.is_set())
            await worker.close()
        except BaseException:
            output.capture = None
            self._busy.pop(worker, None)
            procs.kill(group=True)
            worker.signal(signal.SIGKILL)
            raise

    async def _take(self, key: tuple[tuple[str, str], ...]) -> WorkerProcess:
        """An idle worker started with ``key``'s environment, or the first one of it that
        frees or starts while the run waits."""
        worker = self._idle_of(key)
        if worker is not None:
            return worker
        fut: asyncio.Future[WorkerProcess] = asyncio.get_running_loop().create_future()
        entry = (key, fut)
        self._waiting.append(entry)
        try:
            while not fut.done():
                self._grow(key)
                # Looked at again after a start's time: a busy run may prove long.
                await asyncio.wait({fut}, timeout=self._start_s.value)
            return fut.result()
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._give_back(fut.result())  # handed over as this run was cancelled
            fut.cancel()
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(entry)

    def _idle_of(self, key: tuple[tuple[str, str], ...]) -> WorkerProcess | None:
        for i in range(len(self._idle) - 1, -1, -1):  # the most recently used first
            worker = self._idle[i]
            if worker.exited.is_set():
                del self._idle[i]
                self._spawn_task(worker.close())
            elif worker.key == key:
                del self._idle[i]
                self._busy[worker] = asyncio.get_running_loop().time()
                return worker
        return None

    def _grow(self, key: tuple[tuple[str, str], ...]) -> None:
        """Start a worker of ``key``'s environment if there is room (an idle worker of
        another one may give its place) and it would reach the newest waiting run of it
        sooner than the pool's own."""
        starting = self._starting.setdefault(key, [])
        total = len(self._idle) + len(self._busy) + sum(map(len, self._starting.values()))
        stranger = next((w for w in self._idle if w.key != key), None)
        if total >= self._size and stranger is None:
            return
        now = asyncio.get_running_loop().time()
        position = sum(1 for k, f in self._waiting if k == key and not f.done())
        start_s = self._start_s.value
        assert start_s is not None
        if not pool_growth.should_start(
            position,
            busy_s=[now - t for w, t in self._busy.items() if w.key == key],
            starting_s=[now - t for t in starting],
            mean_s=self._run_s.value,
            start_s=start_s,
            cores=_CORES,
        ):
            return
        if total >= self._size and stranger is not None:
            self._idle.remove(stranger)
            self._spawn_task(stranger.close())
        starting.append(now)
        self._spawn_task(self._start(key, now))

    async def _start(self, key: tuple[tuple[str, str], ...], began: float) -> None:
        try:
            worker = await self._spawn(key)
        except OSError as e:
            log.warning("a worker process could not be started: %s", e)
            waiter = next((f for k, f in self._waiting if k == key and not f.done()), None)
            if waiter is not None:
                waiter.set_exception(e)
            return
        finally:
            self._starting[key].remove(began)
        self._start_s.add(asyncio.get_running_loop().time() - began)
        self._give_back(worker)
        if any(k == key and not f.done() for k, f in self._waiting):
            self._grow(key)  # a start is done: another may begin at once

    def _give_back(self, worker: WorkerProcess) -> None:
        """``worker`` is free: to the first run waiting for its environment, else idle."""
        self._busy.pop(worker, None)
        if self._closed:
            self._spawn_task(worker.close())
            return
        for key, fut in self._waiting:
            if key == worker.key and not fut.done():
                self._busy[worker] = asyncio.get_running_loop().time()
                fut.set_result(worker)
                return
        self._idle.append(worker)

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self, key: tuple[tuple[str, str], ...]) -> WorkerProcess:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        env = {
            **self._base_env,
            **dict(key),
            **self._marks,
            worker_main.FD_VAR: str(theirs.fileno()),
            worker_main.OUT_VAR: str(out_w),
            worker_main.ERR_VAR: str(err_w),
            worker_main.PARENT_VAR: str(os.getpid()),
        }
        env["PYTHONPATH"] = _python_path(env.get("PYTHONPATH"))
        exit_ = _Exit()
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: exit_,
                sys.executable,
                "-c",
                _BOOT,
                worker_main.__file__,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=None,  # the daemon's: what a worker says outside runs goes to its log
                env=env,
                pass_fds=(theirs.fileno(), out_w, err_w),
                start_new_session=True,
            )
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            ours.close()
            raise
        finally:
            theirs.close()
            for fd in (out_w, err_w):
                os.close(fd)
        ours.setblocking(False)
        output = _Output(transport.get_pid(), out_r, err_r)
        worker = WorkerProcess(transport, exit_, output, key)
        try:
            await worker.connect(ours, READY_TIMEOUT_S)
        except BaseException:
            await worker.close()
            raise
        return worker

    async def close(self) -> None:
        """End every idle worker and every start under way (busy ones end with their runs)."""
        self._closed = True
        idle, self._idle = self._idle, []
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, *(w.close() for w in idle), return_exceptions=True)


def _python_path(theirs: str | None) -> str:
    """The daemon's import path for a worker (what it could import, the worker can): its
    ``sys.path`` entries outside the interpreter's own directories, after the invocation's
    ``PYTHONPATH``."""
    roots = (sys.prefix, sys.base_prefix, sys.exec_prefix)
    ours = [os.path.abspath(p or os.getcwd()) for p in sys.path if not (p and p.startswith(roots))]
    return os.pathsep.join([*([theirs] if theirs else []), *dict.fromkeys(ours)])


def crash_cause(code: int | None) -> str:
    """How a process died, in a word: its signal's name (``SIGSEGV``), ``exit 3``, or
    ``unkillable`` (it outlived SIGKILL)."""
    if code is None:
        return "unkillable"
    if code >= 0:
        return f"exit {code}"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def crashed_error(code: int | None, stderr: str) -> RemoteError:
    """The error of a run whose worker died: the signal or status, the last stderr lines."""
    if code is not None and code < 0:
        cause = crash_cause(code)
        name = f" ({cause})" if cause.startswith("SIG") else ""
        how = f"was killed by signal {-code}{name}"
    elif code is None:
        how = "did not exit after SIGKILL"
    else:
        how = f"exited with status {code} before the function returned"
    lines = stderr.splitlines()[-CRASH_LINES:]
    tail = ("\nits last stderr lines:\n" + "\n".join(lines)) if lines else ""
    return RemoteError(type=CRASHED_TYPE, message=f"the run's process {how}{tail}")
