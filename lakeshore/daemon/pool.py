"""Worker processes: each function run happens in one, never on the daemon.

A worker process (:mod:`lakeshore.daemon.worker_main`) is a Python child of the daemon in
a process group of its own. It imports the function, calls it, answers, and waits for the
next run. The pool keeps at most ``size`` of them (the daemon's ``concurrency``) and gives
a run an idle one started with the same environment (the invocation's ``env``); otherwise
the run waits for the first of that environment to free or start, and the pool starts
one (first ending an idle one of another environment when it is full) when that is the
right thing (:mod:`~lakeshore.daemon.pool_growth`): a daemon of small runs keeps about
one worker per core, one of longer runs one per run.

A run's devices (``CUDA_VISIBLE_DEVICES`` …) are not part of its environment's key: a
worker takes the devices of each call it gets, for as long as no run loaded CUDA in it
(CUDA reads them once); from then on it is *pinned* to its devices and serves only runs
granted those (it answers :class:`~lakeshore.daemon.worker_main.Pinned` to a call naming
others, which then runs elsewhere). A run takes an idle worker of its devices first, else
one not pinned; it is queued on a busy one only behind runs of its own devices.

While runs are small (:data:`PIPELINE_BELOW_S`), a run that finds no idle worker is queued
on a busy one (*pipelined*, at most :data:`PIPELINE_DEPTH` behind its running call): a batch
of calls costs one wake-up each way, not one per run. A call queued behind one that has
run :data:`WITHDRAW_AFTER_S` is asked back and goes to the next worker free; a stop signals
a worker only once the calls behind the one it stops are back (see
:mod:`~lakeshore.daemon.worker_main` for the wire).

A worker process is not reused after it crashed, was stopped, answered that a module it
imported has changed on disk (the run goes to a fresh worker, so an edited module is
imported again), or ran ``max_runs`` runs.

A worker's stdout and stderr during runs are two pipes made when it starts, read by the
daemon for as long as it lives and fed to the capture of the run that wrote it: a worker
flushes and writes its mark on both after each run, then answers, and the daemon reads
what the pipes hold before the run is over: what a run printed is the run's alone, all of
it, and costs no pipes of its own.
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
import secrets
import signal
import socket
import sys
from collections import deque
from collections.abc import Callable, Collection, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from lakeshore.daemon import pool_growth, worker_main
from lakeshore.daemon.policies.stopping import DRAIN_S, KILL_WAIT_S, Stopped, stop
from lakeshore.daemon.pool_growth import LONG_RUN_S, Ewma
from lakeshore.daemon.reaper import RUN_MARK, RunProcesses
from lakeshore.daemon.worker_main import Call, Done, Pinned, Stale
from lakeshore.model import RemoteError

if TYPE_CHECKING:
    from lakeshore.daemon.runner import Capture

log = logging.getLogger(__name__)

#: An environment as a key: its items, sorted.
Key = tuple[tuple[str, str], ...]

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
#: Runs are queued on a busy worker (pipelined) while the pool's mean run time is below
#: this (seconds): the small runs whose cost is the wake-ups of a round trip each.
PIPELINE_BELOW_S = LONG_RUN_S
#: Most calls queued on a worker behind its running one.
PIPELINE_DEPTH = 4
#: A call queued behind one that has run this long (seconds) is asked back, and none is
#: queued behind it: no run waits out a long one it was queued behind.
WITHDRAW_AFTER_S = 0.05
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


class _Pipe:
    """One output pipe of a worker: its bytes go to the capture of the run that wrote them
    (the runs in order; a mark ends each), between runs to the daemon's log."""

    def __init__(self, pid: int, fd: int, mark: bytes, stderr: bool) -> None:
        self._pid, self.fd, self._mark, self._stderr = pid, fd, mark, stderr
        #: the captures of the runs sent and not yet past their mark, in order
        self.captures: deque[Capture] = deque()
        #: where bytes go when no run is on (a run that left processes behind)
        self.lingering: Capture | None = None
        #: the end of what was read that may be the start of a mark
        self._held = b""

    def feed(self, data: bytes) -> None:
        data = self._held + data
        self._held = b""
        while data:
            at = data.find(self._mark)
            if at < 0:
                keep = _partial(data, self._mark)
                if keep:
                    data, self._held = data[:-keep], data[-keep:]
                self._give(data)
                return
            self._give(data[:at])
            data = data[at + len(self._mark) :]
            if self.captures:
                self.captures.popleft()

    def _give(self, data: bytes) -> None:
        if not data:
            return
        capture = self.captures[0] if self.captures else self.lingering
        if capture is None:
            log.info("worker %d, between runs: %r", self._pid, data[:_STRAY_CHARS])
        elif self._stderr:
            capture.feed_stderr(data)
        else:
            capture.feed(data)

    def flush(self) -> None:
        """Give what was held back as a possible mark (the pipe has ended)."""
        held, self._held = self._held, b""
        self._give(held)


def _partial(data: bytes, mark: bytes) -> int:
    """How many bytes at the end of ``data`` are the start of ``mark`` (0: none)."""
    at = data.rfind(mark[:1], max(0, len(data) - len(mark) + 1))
    while at >= 0:
        if mark.startswith(data[at:]):
            return len(data) - at
        at = data.find(mark[:1], at + 1)
    return 0


class _Output:
    """A worker's stdout and stderr pipes (the read ends), fed to the captures of its runs
    (:class:`_Pipe`); what comes between runs goes to the daemon's log."""

    def __init__(self, pid: int, out_r: int, err_r: int, mark: bytes) -> None:
        self._pipes = {out_r: _Pipe(pid, out_r, mark, False), err_r: _Pipe(pid, err_r, mark, True)}
        self._open = {out_r: True, err_r: True}
        self.closed = asyncio.Event()
        loop = asyncio.get_running_loop()
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._read, fd)

    def expect(self, capture: Capture) -> None:
        """A run was sent: what comes after the marks of the runs before is its."""
        for pipe in self._pipes.values():
            pipe.captures.append(capture)

    def forget(self, capture: Capture) -> None:
        """A run sent will not start (withdrawn): it writes nothing, and no mark."""
        for pipe in self._pipes.values():
            with contextlib.suppress(ValueError):
                pipe.captures.remove(capture)

    def linger(self, capture: Capture | None) -> None:
        """What comes between runs from now on goes to ``capture`` (processes a run left
        behind write to the pipes), not to the log."""
        for pipe in self._pipes.values():
            pipe.lingering = capture

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
        self._pipes[fd].feed(data)
        return len(data) == _READ_BYTES

    def drain(self) -> None:
        """Take everything the pipes hold now."""
        for fd in self._pipes:
            while self._open.get(fd) and self._read(fd):
                pass

    def _close(self, fd: int) -> None:
        if self._open.pop(fd, None) is not None:
            self._pipes[fd].flush()
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)
        if not self._open:
            self.closed.set()

    def close(self) -> None:
        for fd in list(self._open):
            self._close(fd)


#: What a call's future holds when the worker gave the call back unstarted.
WITHDRAWN = "withdrawn"


class Sent:
    """A call sent to a worker: its future holds the answer, :data:`WITHDRAWN`, or
    ``None`` (the worker died running it); ``answered`` and ``value`` tell the same even
    after the future was cancelled with the task that awaited it."""

    __slots__ = ("capture", "future", "asked", "kept", "answered", "value")

    def __init__(self, capture: Capture, future: asyncio.Future[Any]) -> None:
        self.capture, self.future = capture, future
        #: a withdraw of it was asked; it was kept (it had started)
        self.asked = self.kept = False
        self.answered = False
        self.value: Done | Stale | Pinned | str | None = None


class _Answers(asyncio.Protocol):
    """The worker's end of the socket, read for as long as it lives: each frame to its
    worker as it comes."""

    def __init__(
        self, on_frame: Callable[[worker_main.Frame], None], on_lost: Callable[[], None]
    ) -> None:
        self._buf = bytearray()
        self._on_frame, self._on_lost = on_frame, on_lost

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while len(self._buf) >= worker_main.HEADER.size:
            (size,) = worker_main.HEADER.unpack_from(self._buf)
            end = worker_main.HEADER.size + size
            if len(self._buf) < end:
                break
            frame = worker_main.decode(bytes(self._buf[worker_main.HEADER.size : end]))
            del self._buf[:end]
            self._on_frame(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost()


class WorkerProcess:
    """One worker process: its socket to the daemon, its exit, the calls it holds.

    Calls are answered in the order they were sent (the worker runs them so): the oldest
    unanswered one is running, or about to; when the worker dies, that one died with it
    and the others never started (they come back :data:`WITHDRAWN`), unless the daemon
    closed the worker itself (it does so only once the worker runs nothing more)."""

    def __init__(
        self,
        transport: asyncio.SubprocessTransport,
        exit_: _Exit,
        output: _Output,
        key: Key,
        on_answer: Callable[[WorkerProcess], None],
        devices: Key = (),
    ) -> None:
        self._transport, self._exit = transport, exit_
        self._on_answer = on_answer
        self.output = output
        self._answers = _Answers(self._on_frame, self._on_lost)
        self._ready = asyncio.get_running_loop().create_future()
        self._channel: asyncio.BaseTransport | None = None
        self.key = key
        #: the devices of the last call sent (or it was started with)
        self.devices = devices
        #: a run loaded CUDA in it: it serves only runs of :attr:`devices`
        self.pinned = False
        self.pid = transport.get_pid()
        #: calls sent, ever
        self.runs = 0
        self._next_id = 0
        #: calls sent and not answered, oldest (the running one) first
        self._sent: dict[int, Sent] = {}
        #: when the oldest unanswered call began (loop time), about
        self.head_since = 0.0
        self._closing = False
        #: set at each frame from the worker (and when it is gone)
        self._heard = asyncio.Event()
        #: asks the queued calls back when the running one proves long (_watch_queue)
        self._timer: asyncio.TimerHandle | None = None
        #: still fit for another run
        self.healthy = True
        #: call frames of this turn of the event loop, written together at its end
        self._unsent: list[bytes] = []

    async def connect(self, sock: socket.socket, timeout_s: float) -> None:
        """Read ``sock`` from now on and wait for the worker's ``Ready``.

        Raises:
            OSError: it exited (or said something else) first, or not within ``timeout_s``.
        """
        loop = asyncio.get_running_loop()
        self._channel, _ = await loop.create_unix_connection(lambda: self._answers, sock=sock)
        try:
            async with asyncio.timeout(timeout_s):
                ready = await self._ready
        except TimeoutError:
            ready = False
        if not ready:
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

    @property
    def outstanding(self) -> int:
        """Calls sent and not answered."""
        return len(self._sent)

    def running(self, sent: Sent) -> bool:
        """Whether ``sent`` is the oldest unanswered call (it runs), or was kept when its
        withdraw was asked."""
        return sent.kept or next(iter(self._sent.values()), None) is sent

    def send(self, call: Call, capture: Capture, devices: Key | None = None) -> Sent:
        """Send ``call``; its output goes to ``capture``; ``devices``: its devices (those of
        ``call.devices``, as a key), the worker's from this call on."""
        assert self._channel is not None
        loop = asyncio.get_running_loop()
        self.runs += 1
        self._next_id += 1
        if not self._sent:
            self.head_since = loop.time()
        sent = self._sent[self._next_id] = Sent(capture, loop.create_future())
        if devices is not None:
            self.devices = devices
        self.output.expect(capture)
        frame = msgspec.structs.replace(call, id=self._next_id)
        # Written at the end of this turn with the others sent in it: each write to an idle
        # worker wakes it, and on a busy machine the woken worker preempts the daemon.
        self._unsent.append(worker_main.encode(frame))
        if len(self._unsent) == 1:
            loop.call_soon(self._write_unsent)
        self._watch_queue()
        return sent

    def _write_unsent(self) -> None:
        frames, self._unsent = self._unsent, []
        if frames and self._channel is not None and not self._channel.is_closing():
            self._channel.write(b"".join(frames))  # type: ignore[attr-defined]

    def _watch_queue(self) -> None:
        """Arm the worker's one timer: the calls queued behind its running one are asked
        back once that one has run :data:`WITHDRAW_AFTER_S`."""
        if self._timer is None and len(self._sent) > 1:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(self.head_since + WITHDRAW_AFTER_S, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if len(self._sent) < 2:
            return
        if asyncio.get_running_loop().time() - self.head_since >= WITHDRAW_AFTER_S:
            self._ask_back(None)  # each one's future tells
        else:  # another call runs now: its own time
            self._watch_queue()

    def _ask_back(self, calls: Collection[Sent] | None) -> list[int]:
        """Ask the worker for the calls behind its running one (``calls``, or all) back,
        with :data:`~lakeshore.daemon.worker_main.WITHDRAW_SIGNAL` so that a long run does
        not hold the question; the ids in question (asked now or before)."""
        behind = list(self._sent.items())[1:]
        ids = [i for i, s in behind if calls is None or s in calls]
        new = [i for i in ids if not self._sent[i].asked]
        if new and self._channel is not None and not self._channel.is_closing():
            self._write_unsent()  # the calls in question first
            for i in new:
                self._sent[i].asked = True
            frame = worker_main.Withdraw(ids=new)
            self._channel.write(worker_main.encode(frame))  # type: ignore[attr-defined]
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, worker_main.WITHDRAW_SIGNAL)
        return ids

    async def withdraw(self, calls: Collection[Sent] | None = None) -> None:
        """Ask for the calls behind the running one (``calls``, or all) back, and wait
        until the worker said which it gave back (they hold :data:`WITHDRAWN`) and which
        it had begun."""
        ids = self._ask_back(calls)
        while any(i in self._sent and not self._sent[i].kept for i in ids):
            self._heard.clear()
            await self._heard.wait()

    def _resolve(self, call_id: int, value: Any) -> None:
        sent = self._sent.pop(call_id, None)
        if sent is None:
            return
        if value == WITHDRAWN or isinstance(value, Stale | Pinned):
            self.output.forget(sent.capture)
        sent.answered, sent.value = True, value
        if not sent.future.done():
            sent.future.set_result(value)

    def _on_frame(self, frame: worker_main.Frame) -> None:
        self._heard.set()
        match frame:
            case worker_main.Ready():
                if not self._ready.done():
                    self._ready.set_result(True)
            case Done(id=i) | Stale(id=i):
                if isinstance(frame, Stale) or frame.left:
                    self.healthy = False  # it runs nothing more
                self._resolve(i, frame)
                self.head_since = asyncio.get_running_loop().time()
                self._watch_queue()
                self._on_answer(self)
            case Pinned(id=i, devices=devices):
                self.pinned, self.devices = True, tuple(sorted(devices.items()))
                self._resolve(i, frame)
                self._on_answer(self)
            case worker_main.Withdrawn(ids=ids, kept=kept):
                for i in ids:
                    self._resolve(i, WITHDRAWN)
                for i in kept:
                    if (sent := self._sent.get(i)) is not None:
                        sent.kept = True
                self._on_answer(self)

    def _on_lost(self) -> None:
        self._heard.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._ready.done():
            self._ready.set_result(False)
        for n, call_id in enumerate(list(self._sent)):
            self._resolve(call_id, None if n == 0 and not self._closing else WITHDRAWN)

    def serves(self, key: Key, devices: Key) -> bool:
        """Whether a run of ``key``'s environment and ``devices`` may run on it."""
        return self.key == key and (self.devices == devices or not self.pinned)

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    async def close(self) -> None:
        """End it: its socket closed (it exits when it reads that), SIGTERM if it lingers,
        SIGKILL after :data:`CLOSE_WAIT_S`; its group is killed either way."""
        self.healthy = False
        self._closing = True
        if self._channel is not None:
            self._write_unsent()
            self._channel.close()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_WAIT_S / 2):
                    await self.exited.wait()
            if not self.exited.is_set():
                self.signal(signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CLOSE_WAIT_S / 2):
                        await self.exited.wait()
        finally:  # cancelled too (the pool closing): nothing of it is left
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
        #: workers holding calls
        self._busy: set[WorkerProcess] = set()
        #: workers being started, per environment: when each start began
        self._starting: dict[Key, list[float]] = {}
        #: runs waiting for a worker: their environment, devices, and the worker's future
        self._waiting: deque[tuple[Key, Key, asyncio.Future[WorkerProcess]]] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._run_s = Ewma()
        self._start_s = Ewma(initial=START_S)
        self._regrow: asyncio.TimerHandle | None = None
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
        devices: Mapping[str, str] | None = None,
    ) -> tuple[Done | None, int | None]:
        """Run one function call on a worker; cancel the awaiting task to stop it.

        Args:
            env: the invocation's ``env`` (workers are shared by runs with the same one).
            run_env: this run's own variables (its ids, attempt; the mark is added).
            devices: the run's device variables (``CUDA_VISIBLE_DEVICES`` …).
            mark: the run's ``LAKESHORE_RUN`` value.
            grace_s: the run's ``stop_grace_s``.
            capture: gets the run's output as it comes, and how it was stopped.

        Returns:
            The worker's answer and, when it died instead (``None``), its exit status
            (negative: the signal).

        Raises:
            OSError: no worker process could be started.
        """
        call = Call(
            id=0, fn=ref, args=args, kwargs=kwargs, env={**run_env, RUN_MARK: mark},
            devices=dict(devices) if devices else None,
        )  # fmt: skip
        key: Key = tuple(sorted(env.items()))
        wanted: Key = tuple(sorted(devices.items())) if devices else ()
        while True:
            worker = await self._take(key, wanted)
            answer = await self._run_on(worker, call, wanted, mark, grace_s, capture)
            if answer == WITHDRAWN:
                continue  # it never started there: the next worker free runs it
            if isinstance(answer, Stale):
                log.info("worker %d: %s changed; a new worker runs %s", worker.pid, answer.path,
                         ref)  # fmt: skip
                continue
            if isinstance(answer, Pinned):
                continue  # CUDA holds that worker to other devices: another one runs it
            assert not isinstance(answer, str)
            return answer, worker.returncode if answer is None else None

    async def _run_on(
        self,
        worker: WorkerProcess,
        call: Call,
        devices: Key,
        mark: str,
        grace_s: float,
        capture: Capture,
    ) -> Done | Stale | Pinned | str | None:
        loop = asyncio.get_running_loop()
        procs = RunProcesses(worker.pid, mark)
        sent = worker.send(call, capture, devices or None)
        answer: Done | Stale | Pinned | str | None = None
        try:
            answer = await sent.future
            if answer is None:  # it died: let the kernel finish with it
                worker.healthy = False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(KILL_WAIT_S):
                        await worker.exited.wait()
            return answer
        except asyncio.CancelledError:
            if not sent.answered and not worker.running(sent):
                await worker.withdraw([sent])  # queued: taken back unless it just began
            if sent.answered:  # it never started, or ended before the stop: nothing to stop
                answer = sent.value
                raise
            # Only the call known to run may get the signals: the calls behind it come
            # back first (they never start), or the worker dies with them unstarted.
            worker.healthy = False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await worker.withdraw()
            if sent.answered:
                answer = sent.value
                raise
            began = loop.time()
            try:
                capture.stopped = await stop(procs.signal, worker.exited, grace_s, capture.on_term)
            except asyncio.CancelledError:
                capture.stopped = Stopped(grace_s=grace_s, after_s=loop.time() - began, killed=True)
                raise
            raise
        finally:
            await self._end(worker, answer, procs, capture)

    async def _end(
        self,
        worker: WorkerProcess,
        answer: Done | Stale | Pinned | str | None,
        procs: RunProcesses,
        capture: Capture,
    ) -> None:
        """The run is over: its output is taken, its leftovers are killed, and the worker
        goes back to the pool or is ended."""
        if answer == WITHDRAWN or isinstance(answer, Pinned):  # it never ran there
            return
        output = worker.output
        try:
            if isinstance(answer, Done):
                self._run_s.add(answer.run_s)
            # Marked before it answered: what the run wrote is in the pipes now.
            output.drain()
            left = answer is None or (isinstance(answer, Done) and answer.left)
            if isinstance(answer, Done) and not left and worker.healthy:
                return  # it went back to the pool with its last answer (_answered)
            worker.healthy = False  # it runs nothing more (it gives back what it holds)
            self._busy.discard(worker)
            if left:  # its processes (or a dying worker's) may still write for a moment
                output.linger(capture)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(DRAIN_S):
                        await output.closed.wait()
                output.drain()
            output.linger(None)
            await asyncio.to_thread(procs.kill, group=not worker.exited.is_set())
            await worker.close()
        except BaseException:
            output.linger(None)
            self._busy.discard(worker)
            procs.kill(group=True)
            worker.signal(signal.SIGKILL)
            raise

    def _answered(self, worker: WorkerProcess) -> None:
        """A worker answered a call: another run may be queued on it now; once it holds
        nothing it is free, or ended (its ``max_runs`` are done). An unhealthy one is ended
        by the run that made it so."""
        if not worker.healthy or worker not in self._busy:
            return
        if worker.outstanding:
            self._offer(worker)
        elif self._max_runs is None or worker.runs < self._max_runs:
            self._give_back(worker)
        else:
            self._busy.discard(worker)
            self._spawn_task(worker.close())

    def _pipelines(self, worker: WorkerProcess) -> bool:
        """Whether a run may be queued on busy ``worker`` (*pipelined calls*): the runs are
        small, it holds fewer than :data:`PIPELINE_DEPTH` behind its running one, and that
        one has not run :data:`WITHDRAW_AFTER_S` yet."""
        mean = self._run_s.value
        return (
            mean is not None
            and mean < PIPELINE_BELOW_S
            and worker.healthy
            and 0 < worker.outstanding <= PIPELINE_DEPTH
            and asyncio.get_running_loop().time() - worker.head_since < WITHDRAW_AFTER_S
            and (self._max_runs is None or worker.runs < self._max_runs)
        )

    def _pipelined(self, key: Key, devices: Key) -> WorkerProcess | None:
        """The busy worker of ``key``'s environment and ``devices`` a run may be queued on,
        fewest held first."""
        fit = [w for w in self._busy if (w.key, w.devices) == (key, devices) and self._pipelines(w)]
        return min(fit, key=lambda w: w.outstanding, default=None)

    def _offer(self, worker: WorkerProcess) -> None:
        """Queue the first run waiting for ``worker``'s environment on it, if it may."""
        if self._pipelines(worker):
            self._hand_over(worker)

    def _hand_over(self, worker: WorkerProcess) -> bool:
        """``worker`` to the first run waiting that it serves (one that holds calls: behind
        runs of the same devices only); whether one was."""
        for key, devices, fut in self._waiting:
            if fut.done() or not worker.serves(key, devices):
                continue
            if worker.outstanding and worker.devices != devices:
                continue
            fut.set_result(worker)
            return True
        return False

    async def _take(self, key: Key, devices: Key) -> WorkerProcess:
        """An idle worker started with ``key``'s environment (of ``devices``, else one not
        pinned), a busy one of both whose small runs may queue this one behind them, or the
        first one that frees, starts or may queue it while the run waits."""
        worker = self._idle_of(key, devices)
        if worker is not None:
            return worker
        worker = self._pipelined(key, devices)
        if worker is not None:
            self._grow(key, devices)  # below one worker per core, one starts all the same
            return worker
        fut: asyncio.Future[WorkerProcess] = asyncio.get_running_loop().create_future()
        entry = (key, devices, fut)
        self._waiting.append(entry)
        try:
            self._grow(key, devices)
            self._watch_waiting()
            return await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._answered(fut.result())  # handed over as this run was cancelled
            fut.cancel()
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(entry)

    def _watch_waiting(self) -> None:
        """While runs wait, look again after a start's time whether to start a worker for
        them: a busy run may prove long (one timer for the pool)."""
        if self._regrow is None and self._waiting and not self._closed:
            start_s = self._start_s.value
            assert start_s is not None
            self._regrow = asyncio.get_running_loop().call_later(start_s, self._on_regrow)

    def _on_regrow(self) -> None:
        self._regrow = None
        for key, devices in dict.fromkeys((k, d) for k, d, f in self._waiting if not f.done()):
            self._grow(key, devices)
        self._watch_waiting()

    def _idle_of(self, key: Key, devices: Key) -> WorkerProcess | None:
        """An idle worker for the run, of its devices first, else one not pinned."""
        if not self._idle:  # the common case of a busy daemon
            return None
        for worker in [w for w in self._idle if w.exited.is_set()]:
            self._idle.remove(worker)
            self._spawn_task(worker.close())
        mine = [w for w in self._idle if w.serves(key, devices)]
        if not mine:
            return None
        # The most recently used of its devices, else the most recently used of the rest.
        worker = next((w for w in reversed(mine) if w.devices == devices), mine[-1])
        self._idle.remove(worker)
        self._busy.add(worker)
        return worker

    def _grow(self, key: Key, devices: Key) -> None:
        """Start a worker of ``key``'s environment if there is room (an idle worker of
        another one, or pinned to other devices, may give its place) and it would reach
        the newest waiting run of it sooner than the pool's own."""
        starting = self._starting.setdefault(key, [])
        total = len(self._idle) + len(self._busy) + sum(map(len, self._starting.values()))
        stranger = next((w for w in self._idle if not w.serves(key, devices)), None)
        if total >= self._size and stranger is None:
            return
        now = asyncio.get_running_loop().time()
        position = sum(1 for k, _, f in self._waiting if k == key and not f.done())
        start_s = self._start_s.value
        assert start_s is not None
        if not pool_growth.should_start(
            position,
            busy_s=[now - w.head_since for w in self._busy if w.serves(key, devices)],
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
        self._spawn_task(self._start(key, devices, now))

    async def _start(self, key: Key, devices: Key, began: float) -> None:
        try:
            worker = await self._spawn(key, devices)
        except OSError as e:
            log.warning("a worker process could not be started: %s", e)
            waiter = next((f for k, _, f in self._waiting if k == key and not f.done()), None)
            if waiter is not None:
                waiter.set_exception(e)
            return
        finally:
            self._starting[key].remove(began)
        self._start_s.add(asyncio.get_running_loop().time() - began)
        self._give_back(worker)
        waiting = next(((k, d) for k, d, f in self._waiting if k == key and not f.done()), None)
        if waiting is not None:
            self._grow(*waiting)  # a start is done: another may begin at once

    def _give_back(self, worker: WorkerProcess) -> None:
        """``worker`` is free: to the first run waiting for its environment, else idle."""
        self._busy.discard(worker)
        if self._closed:
            self._spawn_task(worker.close())
            return
        if self._hand_over(worker):
            self._busy.add(worker)
            return
        self._idle.append(worker)

    def _spawn_task(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self, key: Key, devices: Key = ()) -> WorkerProcess:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        token = secrets.token_hex(16)
        env = {
            **self._base_env,
            **dict(key),
            **dict(devices),
            **self._marks,
            worker_main.MARK_VAR: token,
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
        output = _Output(transport.get_pid(), out_r, err_r, worker_main.mark(token))
        worker = WorkerProcess(transport, exit_, output, key, self._answered, devices)
        try:
            await worker.connect(ours, READY_TIMEOUT_S)
        except BaseException:
            await worker.close()
            raise
        return worker

    async def close(self) -> None:
        """End every idle worker and every start under way (busy ones end with their runs)."""
        self._closed = True
        if self._regrow is not None:
            self._regrow.cancel()
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
