"""What a worker process runs: receive a function run, call it, answer, wait for the next.

The daemon (:mod:`lakeshore.daemon.pool`) starts ``python -c`` with this file's source, so
that a worker imports nothing of Lakeshore (the package costs half a second to import, and
its modules must not shadow the user's). It talks to the daemon over a Unix socket pair
(the fd in ``LAKESHORE_WORKER_FD``), in frames of a 4-byte big-endian length and a msgpack
body:

- daemon → worker: ``F`` with two fds attached (the run's stdout and stderr pipes), then a
  :class:`Call` frame;
- worker → daemon: a :class:`Done` frame, or a :class:`Stale` one when a module it imported
  earlier has changed on disk since (it exits; the daemon runs the call on a new worker).

During a run, fds 1 and 2 are the run's pipes (so ``print``, ``logging`` — configured at
``INFO`` on stderr — and any subprocess the function starts write to the run's output);
between runs they are the worker's own. ``SIGTERM`` during a run raises
:class:`RunStopped` in the function, so its ``finally:`` and checkpoint code run; the worker
then answers and exits (a stopped worker is never reused). ``SIGTERM`` between runs exits.
"""

from __future__ import annotations

import array
import asyncio
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import signal
import socket
import struct
import sys
import traceback
from typing import Any

import msgspec

#: The environment variable that names the worker's end of the socket pair.
FD_VAR = "LAKESHORE_WORKER_FD"
#: The daemon's pid (the worker exits if its parent is not that one any more).
PARENT_VAR = "LAKESHORE_WORKER_PARENT"
#: Frame header: the body's length.
HEADER = struct.Struct(">I")


class Call(msgspec.Struct, frozen=True, tag="call"):
    """One function run."""

    fn: str
    args: list[Any]
    kwargs: dict[str, Any]
    #: variables set for this run only (``LAKESHORE_JOB_ID``, ``LAKESHORE_RUN``, …)
    env: dict[str, str]


class Done(msgspec.Struct, frozen=True, tag="done"):
    """How the run ended: its value, or its error as ``(type, message, traceback)``."""

    ok: bool
    value: Any = None
    error: tuple[str, str, str] | None = None
    #: the sha256 (first 16 hex digits) of the file of the function's module
    code_version: str | None = None
    #: processes the run started are still alive (or this is not Linux, where the worker
    #: cannot tell): the daemon finds and kills them
    left: bool = True


class Stale(msgspec.Struct, frozen=True, tag="stale"):
    """A module imported by an earlier run changed on disk: this worker does not run it."""

    path: str


Frame = Call | Done | Stale


class RunStopped(BaseException):
    """Raised in a running function when its run is stopped (SIGTERM: a cancel, its timeout,
    its daemon stopping). A ``BaseException``, like ``KeyboardInterrupt``: an ``except
    Exception`` does not swallow it; ``finally:`` blocks run."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Frame)


def encode(frame: Frame) -> bytes:
    body = _encoder.encode(frame)
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> Frame:
    return _decoder.decode(body)


def send_fds(sock: socket.socket, fds: tuple[int, int]) -> None:
    """The daemon's half of a call's start: the ``F`` byte with the run's two fds."""
    sock.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


class _Worker:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._own_out, self._own_err = os.dup(1), os.dup(2)
        self._running = False
        self._stopped = False
        #: (path, mtime_ns, size) of the files of the modules imported so far, not stdlib's
        #: nor site-packages'
        self._files: dict[str, tuple[int, int]] = {}
        self._digests: dict[tuple[str, int, int], str] = {}
        self._roots = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, _here()})

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the daemon's Ctrl-C is its to handle
        while (got := self._receive()) is not None:
            call, fds = got
            changed = self._changed()
            if changed is not None:
                for fd in fds:
                    os.close(fd)
                self._send(Stale(path=changed))
                return
            self._send(self._run(call, fds))
            if self._stopped:
                return

    def _on_term(self, signum: int, frame: Any) -> None:
        if not self._running:
            raise SystemExit(0)
        self._stopped = True
        raise RunStopped("the run was stopped (SIGTERM)")

    def _run(self, call: Call, fds: list[int]) -> Done:
        saved = {k: os.environ.get(k) for k in call.env}
        os.environ.update(call.env)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        self._running = True
        try:
            try:
                value = _call(call.fn, call.args, call.kwargs)
                done = Done(ok=True, value=msgspec.to_builtins(value))
            except BaseException as e:  # noqa: BLE001 - the run's failure, whatever it is
                done = Done(ok=False, error=_error(e))
            # The answer must go out even if SIGTERM comes now: the run is over.
            self._running = False
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass  # a closed or broken pipe: nothing more to say on it
        except RunStopped:  # SIGTERM between the call and here
            self._running = False
            done = Done(ok=False, error=("RunStopped", "the run was stopped (SIGTERM)", ""))
        finally:
            os.dup2(self._own_out, 1)
            os.dup2(self._own_err, 2)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self._remember()
        version = self._version(call.fn)
        return msgspec.structs.replace(done, code_version=version, left=_left_children())

    def _receive(self) -> tuple[Call, list[int]] | None:
        try:
            msg, fds, _, _ = socket.recv_fds(self._sock, 1, 2)
        except (ConnectionError, OSError):
            return None
        if not msg:
            return None  # the daemon closed its end: exit
        (size,) = HEADER.unpack(self._recv_exact(HEADER.size))
        frame = decode(self._recv_exact(size))
        assert isinstance(frame, Call)
        return frame, list(fds)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise SystemExit(0)
            buf += chunk
        return bytes(buf)

    def _send(self, frame: Frame) -> None:
        self._sock.sendall(encode(frame))

    def _user_files(self) -> dict[str, tuple[int, int]]:
        files = {}
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not path or path.startswith(self._roots):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            files[path] = (st.st_mtime_ns, st.st_size)
        return files

    def _remember(self) -> None:
        self._files = self._user_files()

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
                with open(path, "rb") as f:
                    self._digests[key] = hashlib.sha256(f.read()).hexdigest()[:16]
        except OSError:
            return None
        return self._digests[key]


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
    """The Lakeshore package's directory: its modules are not the user's code."""
    spec = importlib.util.find_spec("lakeshore")
    origin = spec.origin if spec is not None else None
    return os.path.dirname(origin) if origin else "\0"


def _call(ref: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"fn {ref!r} is not of the form 'module:qualname'")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    value = obj(*args, **kwargs)
    if inspect.isawaitable(value):
        value = asyncio.run(_await(value))
    return value


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _error(e: BaseException) -> tuple[str, str, str]:
    t = type(e)
    name = "lakeshore.RunStopped" if t is RunStopped else f"{t.__module__}.{t.__qualname__}"
    return (name, str(e), "".join(traceback.format_exception(e)))


def main() -> None:
    global _SUBREAPER
    _SUBREAPER = _tie_to_daemon()
    sock = socket.socket(fileno=int(os.environ.pop(FD_VAR)))
    sock.setblocking(True)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    _Worker(sock).serve()


if __name__ == "__main__":
    main()
