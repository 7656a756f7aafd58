"""What a worker process runs: receive a function run, call it, answer, wait for the next.

The daemon (:mod:`lakeshore.daemon.pool`) starts ``python -c`` with this file's source, so
that a worker imports nothing of Lakeshore (the package costs half a second to import, and
its modules must not shadow the user's). It talks to the daemon over a Unix socket pair
(the fd in ``LAKESHORE_WORKER_FD``), in frames of a 4-byte big-endian length and a msgpack
body:

- worker → daemon, once started: :class:`Ready`;
- daemon → worker: :class:`Call` frames, each with an id; while a worker's runs are small
  the daemon may send a few more before the first is answered (*pipelined calls*: a batch
  costs one wake-up each way, not one per run); the worker runs them strictly in order;
- worker → daemon: a :class:`Done` frame per call, or a :class:`Stale` one when a module it
  imported earlier has changed on disk since (it exits; the daemon runs the call on a new
  worker), or a :class:`Pinned` one when the call names other devices than the worker's
  and CUDA may have read them (below; the daemon runs the call on another worker);
- daemon → worker: :class:`Withdraw` (ids of calls it sent), followed by
  :data:`WITHDRAW_SIGNAL` so that a worker busy in a long run reads it at once (its handler
  does so only while the user's function runs; otherwise the worker reads it before its next
  call); the worker answers :class:`Withdrawn`: which of them it took back (they never
  started, and never will here) and which it kept (started, or already answered). After a
  stop, a stale module or a run that left processes behind, the worker runs nothing more:
  it answers every call it holds or gets ``Withdrawn`` unasked.

A call names its run's devices (``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER``,
``LAKESHORE_GPUS``). CUDA reads them once, when it initialises in the process, so a worker
takes other devices than its last run's only while CUDA's driver library (``libcuda``) is
not in it: it sets them in its environment for good and runs the call. Once a run loaded
the library, the worker runs only calls of its devices; others it answers ``Pinned``.

It imports little (``asyncio``, ``hashlib`` and ``traceback`` only when a run needs them):
a worker's start is on the path of a run that waits for one.

During a run, fds 1 and 2 are the worker's output pipes (their fds in
``LAKESHORE_WORKER_OUT`` and ``LAKESHORE_WORKER_ERR``; so ``print``, ``logging`` —
configured at ``INFO`` on stderr — and any subprocess the function starts write to the
run's output); between runs they are the worker's own. After a run it flushes both and
writes the worker's *mark* (``\\0`` + a random token from ``LAKESHORE_WORKER_MARK`` +
``\\0``) to each, then answers: the daemon gives what comes before a mark to the run it
ends, what comes after to the next (pipelined runs share the pipes), and has all a run
wrote when its answer comes. ``SIGTERM`` during a run
raises :class:`lakeshore.RunStopped` in the function, so its ``finally:`` and checkpoint code
run; the worker then answers and exits (a stopped worker is never reused). ``SIGTERM`` between
runs exits.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import struct
import sys
import time
from collections import deque
from typing import Any

import msgspec

#: The environment variable that names the worker's end of the socket pair.
FD_VAR = "LAKESHORE_WORKER_FD"
#: The environment variables that name the write ends of the worker's output pipes.
OUT_VAR, ERR_VAR = "LAKESHORE_WORKER_OUT", "LAKESHORE_WORKER_ERR"
#: The daemon's pid (the worker exits if its parent is not that one any more).
PARENT_VAR = "LAKESHORE_WORKER_PARENT"
#: The directory of the run's code snapshot (spec/code.md): a worker started with it has it
#: first on ``sys.path`` and as its working directory; a command's runs have it as theirs.
CODE_DIR_VAR = "LAKESHORE_CODE_DIR"
#: The digest of the run's code snapshot (every run that has one sees it).
CODE_VAR = "LAKESHORE_CODE"
#: The token of the mark written to the output pipes after each run.
MARK_VAR = "LAKESHORE_WORKER_MARK"
#: Frame header: the body's length.
HEADER = struct.Struct(">I")
#: Sent by the daemon after a :class:`Withdraw`, to the worker alone (not its group).
WITHDRAW_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2


def mark(token: str) -> bytes:
    """The bytes a worker with ``token`` writes to its output pipes after each run."""
    return b"\0" + token.encode() + b"\0"


class Call(msgspec.Struct, frozen=True, tag="call"):
    """One function run."""

    #: the call's number on this worker (its answer carries it)
    id: int
    fn: str
    args: list[Any]
    kwargs: dict[str, Any]
    #: variables set for this run only (``LAKESHORE_JOB_ID``, ``LAKESHORE_RUN``, …)
    env: dict[str, str]
    #: the run's devices (``CUDA_VISIBLE_DEVICES`` …): the worker's from this run on
    #: (``None``: those it has)
    devices: dict[str, str] | None = None


class Done(msgspec.Struct, frozen=True, tag="done"):
    """How the run ended: its value, or its error as ``(type, message, traceback)``."""

    id: int
    ok: bool
    value: Any = None
    error: tuple[str, str, str] | None = None
    #: the sha256 (first 16 hex digits) of the file of the function's module
    code_version: str | None = None
    #: processes the run started are still alive (or this is not Linux, where the worker
    #: cannot tell): the daemon finds and kills them
    left: bool = True
    #: how long the function itself took (seconds): what the pool's growth goes by (the
    #: daemon's own view of a run includes its event loop's delays)
    run_s: float = 0.0


class Ready(msgspec.Struct, frozen=True, tag="ready"):
    """The worker has started and waits for its first call."""


class Stale(msgspec.Struct, frozen=True, tag="stale"):
    """A module imported by an earlier run changed on disk: this worker does not run it."""

    id: int
    path: str


class Pinned(msgspec.Struct, frozen=True, tag="pinned"):
    """The call names other devices than the worker's, and CUDA may have read the worker's
    (its driver library is loaded): this worker does not run it."""

    id: int
    #: the devices the worker keeps
    devices: dict[str, str]


class Withdraw(msgspec.Struct, frozen=True, tag="withdraw"):
    """The daemon takes back these calls if they have not started."""

    ids: list[int]


class Withdrawn(msgspec.Struct, frozen=True, tag="withdrawn"):
    """Calls taken back (never started here), and those asked for that were kept."""

    ids: list[int]
    kept: list[int] = []


Frame = Call | Ready | Done | Stale | Pinned | Withdraw | Withdrawn


class RunStopped(BaseException):
    """What a stop raises in a run whose code did not import ``lakeshore`` (so could not name
    :class:`lakeshore.RunStopped`, which a run that did gets: :func:`_stop_class`). A
    ``BaseException``: an ``except Exception`` does not swallow it; ``finally:`` blocks run."""


def _stop_class() -> type[BaseException]:
    """``lakeshore.RunStopped`` once the run's code has imported ``lakeshore`` (the worker
    itself never does: it costs half a second), so that ``except lakeshore.RunStopped``
    catches a stop; else this file's own."""
    return getattr(sys.modules.get("lakeshore"), "RunStopped", RunStopped)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Frame)


def encode(frame: Frame) -> bytes:
    body = _encoder.encode(frame)
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> Frame:
    return _decoder.decode(body)


#: The most of a frame read at once.
RECV_BYTES = 1 << 16


class _Worker:
    def __init__(self, sock: socket.socket, out: int, err: int, token: str) -> None:
        self._sock = sock
        #: what was read of the socket and not yet taken as a frame
        self._inbox = bytearray()
        #: calls received and not yet started, in order
        self._queue: deque[Call] = deque()
        self._closed = False
        self._out, self._err = out, err
        self._mark = mark(token)
        self._own_out, self._own_err = os.dup(1), os.dup(2)
        self._running = False
        #: the user's function is on the stack (a withdraw's handler may read the socket)
        self._in_call = False
        self._in_handler = False
        self._stopped = False
        #: it runs nothing more: every call it holds or gets is withdrawn
        self._retired = False
        #: (path, mtime_ns, size) of the files of the modules imported so far, not stdlib's
        #: nor site-packages'
        self._files: dict[str, tuple[int, int]] = {}
        #: how many modules were loaded when ``_files`` was last brought up to date
        self._modules_seen = 0
        self._digests: dict[tuple[str, int, int], str] = {}
        #: the devices of its runs (``None``: none named yet)
        self._devices: dict[str, str] | None = None
        self._roots = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, _here()})

    def serve(self) -> None:
        """Say :class:`Ready`, then run what comes until the daemon closes its end."""
        # Before Ready: from then on the daemon may ask calls back, and the signal's default
        # action would kill the worker (a no-op crashed so, 1 in 10,000, on a busy machine).
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon's Ctrl-C is its to handle
        # As SIGTERM's: a system call it interrupts returns to Python (which retries it,
        # PEP 475) so that the handler runs at once, not when a restarted call ends.
        signal.signal(WITHDRAW_SIGNAL, self._on_withdraw)
        self._send(Ready())
        while True:
            self._take(block=not self._queue)  # what came meanwhile, withdraws first
            if self._closed:
                return  # the daemon closed its end: what it sent is not awaited
            if self._retired:
                self._withdraw_all()
            if not self._queue:
                continue
            call = self._queue.popleft()
            changed = self._changed()
            if changed is not None:
                self._send(Stale(id=call.id, path=changed))
                self._retire()
                return
            if not self._take_devices(call):
                assert self._devices is not None
                self._send(Pinned(id=call.id, devices=self._devices))
                continue
            done = self._run(call)
            self._send(done)
            if self._stopped:
                self._retire()
                return
            if done.left:
                self._retire()  # served on until the daemon closes its end

    def _take_devices(self, call: Call) -> bool:
        """Make the call's devices the worker's, unless CUDA may have read others already
        (then ``False``: the call is not run here)."""
        wanted = call.devices
        if wanted is None or wanted == self._devices:
            return True
        if self._devices is not None and _cuda_loaded():
            return False
        os.environ.update(wanted)
        self._devices = wanted
        return True

    def _retire(self) -> None:
        self._retired = True
        self._withdraw_all()

    def _withdraw_all(self) -> None:
        if self._queue:
            ids = [c.id for c in self._queue]
            self._queue.clear()
            self._send(Withdrawn(ids=ids))

    def _on_term(self, signum: int, frame: Any) -> None:
        if not self._running:
            raise SystemExit(0)
        self._stopped = True
        raise _stop_class()("the run was stopped (SIGTERM)")

    def _on_withdraw(self, signum: int, frame: Any) -> None:
        """Read what the daemon sent while the user's function runs (between runs the
        worker reads it itself, before its next call)."""
        if not self._in_call or self._in_handler:
            return
        self._in_handler = True
        try:
            self._take(block=False)
        finally:
            self._in_handler = False

    def _run(self, call: Call) -> Done:
        saved = {k: os.environ.get(k) for k in call.env}
        os.environ.update(call.env)
        os.dup2(self._out, 1)
        os.dup2(self._err, 2)
        self._running = True
        began = time.perf_counter()
        try:
            try:
                self._in_call = True
                try:
                    value = _call(call.fn, call.args, call.kwargs)
                finally:
                    self._in_call = False
                done = Done(id=call.id, ok=True, value=msgspec.to_builtins(value))
            except BaseException as e:  # noqa: BLE001 - the run's failure, whatever it is
                done = Done(id=call.id, ok=False, error=_error(e))
            # The answer must go out even if SIGTERM comes now: the run is over.
            self._running = False
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass  # a closed or broken pipe: nothing more to say on it
        except (RunStopped, _stop_class()):  # SIGTERM between the call and here
            self._running = False
            error = ("RunStopped", "the run was stopped (SIGTERM)", "")
            done = Done(id=call.id, ok=False, error=error)
        finally:
            self._in_call = False
            for fd in (self._out, self._err):
                try:
                    os.write(fd, self._mark)
                except OSError:
                    pass  # the daemon is gone: nothing reads the pipes
            os.dup2(self._own_out, 1)
            os.dup2(self._own_err, 2)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        run_s = time.perf_counter() - began
        self._remember()
        version = self._version(call.fn)
        return msgspec.structs.replace(
            done, code_version=version, left=_left_children(), run_s=run_s
        )

    def _take(self, *, block: bool) -> None:
        """Read what the socket holds (waiting for something when ``block``) and take its
        frames: calls are queued, withdraws answered. Frames are read in as big pieces as
        come (a piece may end inside a frame, or hold the next one)."""
        while not self._closed:
            try:
                piece = self._sock.recv(RECV_BYTES, 0 if block else socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                piece = b""
            if not piece:
                self._closed = True  # the daemon closed its end: exit once idle
                break
            self._inbox += piece
            block = False
        while len(self._inbox) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._inbox)
            end = HEADER.size + size
            if len(self._inbox) < end:
                break
            frame = decode(bytes(self._inbox[HEADER.size : end]))
            del self._inbox[:end]
            if isinstance(frame, Call):
                self._queue.append(frame)
            elif isinstance(frame, Withdraw):
                asked = set(frame.ids)
                taken = [c.id for c in self._queue if c.id in asked]
                self._queue = deque(c for c in self._queue if c.id not in asked)
                self._send(Withdrawn(ids=taken, kept=sorted(asked.difference(taken))))

    def _send(self, frame: Frame) -> None:
        try:
            self._sock.sendall(encode(frame))
        except OSError:
            self._closed = True  # the daemon is gone

    def _remember(self) -> None:
        """Note the files of the modules imported since the last run, as they are now (a
        module's file seen once keeps what it was then: a change is a change since)."""
        if len(sys.modules) == self._modules_seen:
            return  # nothing new was imported (the usual warm run)
        self._modules_seen = len(sys.modules)
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not path or path in self._files or path.startswith(self._roots):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            self._files[path] = (st.st_mtime_ns, st.st_size)

    def _changed(self) -> str | None:
        """A file of a module imported by an earlier run that changed since; ``None``."""
        for path, seen in self._files.items():
            try:
                st = os.stat(path)
            except OSError:
                return path
            if (st.st_mtime_ns, st.st_size) != seen:
                return path
        return None

    def _version(self, ref: str) -> str | None:
        module = sys.modules.get(ref.partition(":")[0])
        path = getattr(module, "__file__", None)
        if not path:
            return None
        try:
            st = os.stat(path)
            key = (path, st.st_mtime_ns, st.st_size)
            if key not in self._digests:
                import hashlib

                with open(path, "rb") as f:
                    self._digests[key] = hashlib.sha256(f.read()).hexdigest()[:16]
        except OSError:
            return None
        return self._digests[key]


def _cuda_loaded() -> bool:
    """Whether CUDA's driver library is mapped into this process (CUDA may then have read
    ``CUDA_VISIBLE_DEVICES``; it cannot have without it). Where the maps cannot be read,
    taken to be: a worker that cannot tell keeps its devices."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return b"/libcuda.so" in f.read()
    except OSError:
        return True


def _tie_to_daemon() -> bool:
    """On Linux: die with the daemon (``PR_SET_PDEATHSIG``: a SIGKILLed daemon leaves no
    worker behind), and become this process's descendants' reaper
    (``PR_SET_CHILD_SUBREAPER``): what a run starts stays below it even when it
    double-forks or calls ``setsid``, so "no children left" after a run means nothing of
    the run is left. Whether the latter holds."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != int(os.environ.pop(PARENT_VAR, "0")):
            os._exit(0)  # the daemon died before the line above
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError, ValueError):
        return False


_SUBREAPER = False


def _left_children() -> bool:
    """Whether processes the run started live on (the zombies among them reaped first);
    ``True`` when this cannot be told."""
    if not _SUBREAPER:
        return True
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False  # no children at all
        if pid == 0:
            break  # some are alive
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                if f.read().strip():
                    return True
    except OSError:
        return True
    return False


def _here() -> str:
    """The Lakeshore package's directory (this file's is ``lakeshore/daemon``): its modules
    are not the user's code."""
    here = globals().get("__file__")
    return os.path.dirname(os.path.dirname(os.path.abspath(here))) if here else "\0"


def resolve(ref: str) -> Any:
    """Import ``module:qualname`` and return the object it names (the daemon's inline runs
    use it too).

    Raises:
        ValueError: ``ref`` has no ``:``.
        ImportError / AttributeError: the module or a name in it does not exist.
    """
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"fn {ref!r} is not of the form 'module:qualname'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not (module_name + ".").startswith(e.name + "."):
            raise  # a module the function's own module imports: its error as it is
        raise ModuleNotFoundError(_not_found(ref, e), name=e.name) from None
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _not_found(ref: str, e: ModuleNotFoundError) -> str:
    """Where the function was looked for, and how to ship it there."""
    import socket as _socket

    code = os.environ.get(CODE_VAR)
    shipped = f"code {code}" if code else "no code shipped (the daemon's own path)"
    return (
        f"{e}: {ref} was looked for on host {_socket.gethostname()} with {shipped}, in "
        f"working directory {os.getcwd()}. Ship the code with the invocation: `lakeshore "
        'submit --code DIR`, `@udf(code=".")` or `lakeshore.configure(code=".")`; or start '
        f"the daemon where the module is importable. sys.path: {sys.path}"
    )


def _call(ref: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    value = resolve(ref)(*args, **kwargs)
    if hasattr(value, "__await__"):  # a coroutine function's (inspect.isawaitable's test)
        import asyncio

        value = asyncio.run(_await(value))
    return value


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _error(e: BaseException) -> tuple[str, str, str]:
    import traceback

    t = type(e)
    stop = t in (RunStopped, _stop_class())
    name = "lakeshore.RunStopped" if stop else f"{t.__module__}.{t.__qualname__}"
    return (name, str(e), "".join(traceback.format_exception(e)))


def main() -> None:
    global _SUBREAPER
    _SUBREAPER = _tie_to_daemon()
    if code_dir := os.environ.get(CODE_DIR_VAR):  # the runs' code snapshot, first of all
        sys.path.insert(0, code_dir)
        os.chdir(code_dir)
    sock = socket.socket(fileno=int(os.environ.pop(FD_VAR)))
    sock.setblocking(True)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    out, err = int(os.environ.pop(OUT_VAR)), int(os.environ.pop(ERR_VAR))
    for fd in (out, err):
        os.set_inheritable(fd, False)  # a run's subprocesses get them as their fds 1 and 2
    worker = _Worker(sock, out, err, os.environ.pop(MARK_VAR))
    worker.serve()


if __name__ == "__main__":
    main()
