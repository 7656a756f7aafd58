"""Worker processes: each function run happens in one, never on the daemon.

A worker process (:mod:`lakeshore.daemon.worker_main`) is a Python child of the daemon in
a process group of its own. It imports the function, calls it, answers, and waits for the
next run. The pool keeps at most ``size`` of them (the daemon's ``concurrency``) and gives
a run an idle one started with the same environment (the invocation's ``env``); otherwise
it starts one, first ending an idle one that does not match when the pool is full.

A worker process is not reused after it crashed, was stopped, answered that a module it
imported has changed on disk (the run goes to a fresh worker, so an edited module is
imported again), or ran ``max_runs`` runs.

Each run gets two fresh pipes for its stdout and stderr, passed to the worker with the
call: the run's output is the run's alone, and it is over once the worker has answered and
the pipes have delivered what is left (for at most
:data:`~lakeshore.daemon.policies.stopping.DRAIN_S`:
a process the function started may hold them). Then whatever carries the run's
``LAKESHORE_RUN`` mark is killed (:mod:`lakeshore.daemon.reaper`), the worker itself aside.

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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lakeshore.daemon import worker_main
from lakeshore.daemon.policies.stopping import DRAIN_S, KILL_WAIT_S, Stopped, stop
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


class _Pipe(asyncio.Protocol):
    """One of a run's pipes: its bytes to the capture until the writers close it."""

    def __init__(self, feed: Callable[[bytes], None]) -> None:
        self._feed = feed
        self.closed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self._feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


class WorkerProcess:
    """One worker process: its socket to the daemon, its exit, how many runs it did."""

    def __init__(
        self,
        transport: asyncio.SubprocessTransport,
        exit_: _Exit,
        sock: socket.socket,
        key: tuple[tuple[str, str], ...],
    ) -> None:
        self._transport, self._exit, self._sock = transport, exit_, sock
        self.key = key
        self.pid = transport.get_pid()
        self.runs = 0
        #: still fit for another run
        self.healthy = True

    @property
    def exited(self) -> asyncio.Event:
        return self._exit.exited

    @property
    def returncode(self) -> int | None:
        return self._transport.get_returncode()

    async def call(self, call: Call, out_w: int, err_w: int) -> Done | Stale | None:
        """Send ``call`` with the run's pipes; its answer, or ``None`` when the worker died
        (or closed its end) first."""
        loop = asyncio.get_running_loop()
        self.runs += 1
        try:
            worker_main.send_fds(self._sock, (out_w, err_w))
            await loop.sock_sendall(self._sock, worker_main.encode(call))
            header = await _recv_exact(loop, self._sock, worker_main.HEADER.size)
            if header is None:
                return None
            (size,) = worker_main.HEADER.unpack(header)
            body = await _recv_exact(loop, self._sock, size)
        except OSError:
            return None
        if body is None:
            return None
        answer = worker_main.decode(body)
        return answer if isinstance(answer, (Done, Stale)) else None

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    async def close(self) -> None:
        """End it: its socket closed (it exits when it reads that), SIGTERM if it lingers,
        SIGKILL after :data:`CLOSE_WAIT_S`; its group is killed either way."""
        self.healthy = False
        self._sock.close()
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


async def _recv_exact(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = await loop.sock_recv(sock, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class Pool:
    """The daemon's worker processes.

    Args:
        base_env: the daemon's environment, under each worker's.
        size: most worker processes kept (the daemon's ``concurrency``).
        max_runs: runs after which a worker is replaced; ``None``: no limit.
    """

    def __init__(self, base_env: Mapping[str, str], *, size: int, max_runs: int | None) -> None:
        self._base_env = dict(base_env)
        self._size, self._max_runs = size, max_runs
        self._idle: list[WorkerProcess] = []
        self._busy: set[WorkerProcess] = set()
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
        pipes: list[tuple[asyncio.BaseTransport, _Pipe]] = []
        answer: Done | Stale | None = None
        try:
            writers = []
            for feed in (capture.feed, capture.feed_stderr):
                r, w = os.pipe()
                writers.append(w)
                pipe = _Pipe(feed)
                transport, _ = await loop.connect_read_pipe(lambda p=pipe: p, os.fdopen(r, "rb", 0))
                pipes.append((transport, pipe))
            try:
                answer = await worker.call(call, writers[0], writers[1])
            finally:
                for w in writers:
                    os.close(w)
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
                capture.stopped = await stop(procs.signal, worker.exited, grace_s)
            except asyncio.CancelledError:
                capture.stopped = Stopped(grace_s=grace_s, after_s=loop.time() - began, killed=True)
                raise
            raise
        finally:
            await self._end(worker, answer, pipes, procs)

    async def _end(
        self,
        worker: WorkerProcess,
        answer: Done | Stale | None,
        pipes: list[tuple[asyncio.BaseTransport, _Pipe]],
        procs: RunProcesses,
    ) -> None:
        """The run is over: the pipes deliver what is left, the run's leftovers are killed,
        and the worker goes back to the pool or is ended."""
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_S):
                    for _, pipe in pipes:
                        await pipe.closed.wait()
            for transport, _ in pipes:
                transport.close()
            healthy = isinstance(answer, Done) and worker.healthy
            if healthy and (self._max_runs is None or worker.runs < self._max_runs):
                assert isinstance(answer, Done)
                if answer.left:  # the run's processes outlive it: found by their mark
                    await asyncio.to_thread(procs.kill, group=False)
                self._give_back(worker)
            else:
                self._busy.discard(worker)
                await asyncio.to_thread(procs.kill, group=not worker.exited.is_set())
                await worker.close()
        except BaseException:
            for transport, _ in pipes:
                transport.close()
            self._busy.discard(worker)
            procs.kill(group=True)
            worker.signal(signal.SIGKILL)
            raise

    async def _take(self, key: tuple[tuple[str, str], ...]) -> WorkerProcess:
        """An idle worker started with ``key``'s environment, or a new one."""
        while self._idle:
            worker = self._idle.pop()
            if worker.exited.is_set():
                await worker.close()
            elif worker.key == key:
                self._busy.add(worker)
                return worker
            else:
                self._idle.insert(0, worker)
                break
        if self._idle and len(self._idle) + len(self._busy) >= self._size:
            stranger = next((w for w in self._idle if w.key != key), None)
            if stranger is not None:
                self._idle.remove(stranger)
                await stranger.close()
        worker = await self._spawn(key)
        self._busy.add(worker)
        return worker

    def _give_back(self, worker: WorkerProcess) -> None:
        self._busy.discard(worker)
        if self._closed:
            asyncio.ensure_future(worker.close())  # noqa: RUF006 - it bounds itself
        else:
            self._idle.append(worker)

    async def _spawn(self, key: tuple[tuple[str, str], ...]) -> WorkerProcess:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {
            **self._base_env,
            **dict(key),
            worker_main.FD_VAR: str(theirs.fileno()),
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
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        return WorkerProcess(transport, exit_, ours, key)

    async def close(self) -> None:
        """End every idle worker (busy ones end with their runs)."""
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(w.close() for w in idle), return_exceptions=True)


def _python_path(theirs: str | None) -> str:
    """The daemon's import path for a worker (what it could import, the worker can): its
    ``sys.path`` entries outside the interpreter's own directories, after the invocation's
    ``PYTHONPATH``."""
    roots = (sys.prefix, sys.base_prefix, sys.exec_prefix)
    ours = [os.path.abspath(p or os.getcwd()) for p in sys.path if not (p and p.startswith(roots))]
    return os.pathsep.join([*([theirs] if theirs else []), *dict.fromkeys(ours)])


def crashed_error(code: int | None, stderr: str) -> RemoteError:
    """The error of a run whose worker died: the signal or status, the last stderr lines."""
    if code is not None and code < 0:
        try:
            name = f" ({signal.Signals(-code).name})"
        except ValueError:
            name = ""
        how = f"was killed by signal {-code}{name}"
    elif code is None:
        how = "did not exit after SIGKILL"
    else:
        how = f"exited with status {code} before the function returned"
    lines = stderr.splitlines()[-CRASH_LINES:]
    tail = ("\nits last stderr lines:\n" + "\n".join(lines)) if lines else ""
    return RemoteError(type=CRASHED_TYPE, message=f"the run's process {how}{tail}")
