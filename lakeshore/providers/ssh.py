"""The ``ssh`` backend: daemons started over SSH on a provider's hosts, outliving the session.

A launch returns at once; a task owned by this backend then connects to every host of the
provider (one connection per host for the whole launch), counts the provider's live
daemons on each (their pid files, checked against the processes' command lines), places
each new daemon on the host with the most free slots (ties: the config's host order) and
starts it there with ``nohup setsid`` (:mod:`lakeshore.providers.ssh_scripts`). The
daemon's credential travels on the SSH command's stdin, never on a command line or in a
file. Where it runs (``{"host": entry, "pid": pid}``) goes to the placed callback and so
onto the worker row, which is all :meth:`SshProvider.stop` needs, also after a restart of
the control plane. A daemon that cannot be started (host unreachable, no free slot, no
lakeshore there) is reported through the exit callback with the reason.

The backend watches no daemon: one that dies is found ``lost`` by its missing heartbeats.
:meth:`SshProvider.close` leaves the daemons running; a restarted control plane finds them
again when they heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any

from cryptography.utils import CryptographyDeprecationWarning

with warnings.catch_warnings():
    # asyncssh names cryptography's DSA classes while it imports, which cryptography 51
    # deprecates; Lakeshore never uses DSA keys, and a user should not see this at start-up.
    warnings.filterwarnings("ignore", category=CryptographyDeprecationWarning, module=r"asyncssh\.")
    import asyncssh

from lakeshore.errors import Unavailable
from lakeshore.model import Provider, Worker
from lakeshore.providers import ssh_scripts as scripts
from lakeshore.providers.base import AccessFor, ExitCallback, PlacedCallback
from lakeshore.providers.ssh_config import (
    DEFAULT_KNOWN_HOSTS,
    SshConfig,
    Target,
    parse_config,
    target_of,
)
from lakeshore.providers.ssh_placement import HostState, place, unplaced_reason

log = logging.getLogger(__name__)


class SshProvider:
    """Starts daemons on other hosts over SSH and stops them there.

    Args:
        on_exit: called once for a daemon that could not be started, or was stopped.
        on_placed: called once a daemon runs: ``{"host": <hosts entry>, "pid": <pid>}``.
        flags: given to every daemon (:func:`~lakeshore.providers.local.daemon_flags`).
        stop_timeout_s: after SIGTERM, how long a daemon may drain before SIGKILL.
        command_timeout_s: bound of each command run on a host (the stop wait excepted).
    """

    def __init__(
        self,
        on_exit: ExitCallback,
        on_placed: PlacedCallback,
        *,
        flags: Sequence[str] = (),
        stop_timeout_s: float = 30.0,
        command_timeout_s: float = 30.0,
    ) -> None:
        self._on_exit, self._on_placed, self._flags = on_exit, on_placed, tuple(flags)
        self._stop_timeout_s = stop_timeout_s
        self._command_timeout_s = command_timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        #: worker id -> its stop in progress (a second stop signals nothing more)
        self._stopping: dict[str, asyncio.Task[None]] = {}
        #: (namespace, provider) -> its lock: a provider's launches place one at a time,
        #: each counting the daemons the one before started
        self._placing: dict[tuple[str, str], asyncio.Lock] = {}

    def check_config(self, config: dict[str, Any]) -> None:
        """Refuse a config :func:`~lakeshore.providers.ssh_config.parse_config` refuses."""
        parse_config(config)

    def check_launch(
        self, provider: Provider, *, names: Sequence[str] = (), queues: Sequence[str] = ()
    ) -> None:
        """Refuse a launch on a row whose config is no longer valid."""
        parse_config(provider.config)

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        """Start the daemons in a task of this backend; returns at once."""
        cfg = parse_config(provider.config)
        self._spawn(self._launch(provider, cfg, workers, access), f"ssh-launch:{provider.name}")

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        """SIGTERM the daemon on its host (if that pid still runs it); a task of this
        backend then waits ``stop_timeout_s`` for it to end, SIGKILLs it if not, and
        reports the exit.

        Raises:
            Unavailable: the host cannot be reached.
        """
        entry, pid = worker.placement.get("host"), worker.placement.get("pid")
        if not entry or not pid:
            return False
        if worker.id in self._stopping:
            return True
        cfg = parse_config(provider.config)
        try:
            conn = await self._connect(cfg, target_of(cfg, entry))
        except Exception as e:  # any failure to connect means "cannot reach"
            why = _why(e, cfg.connect_timeout_s)
            raise Unavailable(f"cannot reach host {entry} to stop {worker.name!r}: {why}") from None
        try:
            said = await self._run(conn, scripts.terminate(cfg, worker, pid))
        except (OSError, asyncssh.Error, TimeoutError) as e:
            conn.close()
            why = _why(e, self._command_timeout_s)
            raise Unavailable(f"could not signal {worker.name!r} on host {entry}: {why}") from None
        if said.exit_status != 0 or _last_word(said) != "signalled":
            conn.close()
            if said.exit_status != 0:
                why = _output(said)
                raise Unavailable(f"could not signal {worker.name!r} on host {entry}: {why}")
            log.info("daemon %s (%s) runs no more on host %s", worker.name, worker.id, entry)
            self._on_exit(worker, None, f"no process left on host {entry} (pid {pid})", True)
            return False
        log.info("stopping daemon %s (%s) on host %s, pid %s", worker.name, worker.id, entry, pid)
        task = self._spawn(self._await_end(conn, cfg, worker, entry, pid), f"ssh-stop:{worker.id}")
        self._stopping[worker.id] = task
        task.add_done_callback(lambda _: self._stopping.pop(worker.id, None))
        return True

    def daemons(self) -> list[Worker]:
        """``[]``: the daemons run on other hosts (only ``local`` ones count per host)."""
        return []

    async def wait_idle(self) -> None:
        """Return once every launch and stop in progress has ended (for tests)."""
        while running := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(running)

    async def close(self) -> None:
        """Cancel the launches and stops in progress and close their connections; the
        daemons keep running (a restarted control plane finds them again)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _launch(
        self, provider: Provider, cfg: SshConfig, workers: list[Worker], access: AccessFor
    ) -> None:
        pending = {w.id: w for w in workers}
        conns: dict[str, asyncssh.SSHClientConnection] = {}
        try:
            lock = self._placing.setdefault((provider.namespace, provider.name), asyncio.Lock())
            async with lock:
                targets = [target_of(cfg, entry) for entry in cfg.hosts]
                states = await asyncio.gather(
                    *(self._survey(cfg, provider, t, conns) for t in targets)
                )
                plan = place(workers, states, cfg.slots)
                for worker, target in plan:
                    if target is None:
                        pending.pop(worker.id)
                        reason = unplaced_reason(states, cfg.slots)
                        log.warning(
                            "cannot start daemon %s (%s): %s", worker.name, worker.id, reason
                        )
                        self._on_exit(worker, None, reason, False)
                by_host: dict[str, list[Worker]] = {}
                for worker, target in plan:
                    if target is not None:
                        by_host.setdefault(target.entry, []).append(worker)
                await asyncio.gather(
                    *(
                        self._start_all(
                            conns[entry], cfg, target_of(cfg, entry), ws, access, pending
                        )
                        for entry, ws in by_host.items()
                    )
                )
        except asyncio.CancelledError:
            for worker in pending.values():
                self._on_exit(worker, None, "the control plane stopped before it was started", True)
            raise
        except Exception as e:  # a launch task's boundary: every worker left is reported
            log.exception("launch on provider %s failed", provider.name)
            for worker in pending.values():
                self._on_exit(worker, None, f"could not start: {e}", False)
        finally:
            for conn in conns.values():
                conn.close()
            await asyncio.gather(*(c.wait_closed() for c in conns.values()), return_exceptions=True)

    async def _survey(
        self,
        cfg: SshConfig,
        provider: Provider,
        target: Target,
        conns: dict[str, asyncssh.SSHClientConnection],
    ) -> HostState:
        """Connect to ``target`` (kept in ``conns``) and count the provider's daemons there."""
        try:
            conn = await self._connect(cfg, target)
        except Exception as e:  # reported as the host's state
            return target, f"cannot reach host {target.entry}: {_why(e, cfg.connect_timeout_s)}"
        conns[target.entry] = conn
        try:
            done = await self._run(conn, scripts.count(cfg, provider.namespace, provider.name))
        except (OSError, asyncssh.Error, TimeoutError) as e:
            return target, f"host {target.entry}: {_why(e, self._command_timeout_s)}"
        said = _last_word(done)
        if done.exit_status != 0 or not said.isdigit():
            return target, f"host {target.entry}: {_output(done)}"
        return target, int(said)

    async def _start_all(
        self,
        conn: asyncssh.SSHClientConnection,
        cfg: SshConfig,
        target: Target,
        workers: Iterable[Worker],
        access: AccessFor,
        pending: dict[str, Worker],
    ) -> None:
        for worker in workers:
            given = access(worker)
            nats_url = cfg.nats_url or given.nats_url
            script, argv = scripts.start(cfg, worker, nats_url, self._flags)
            try:
                done = await self._run(conn, script, scripts.start_input(given))
                pid = _last_word(done) if done.exit_status == 0 else ""
            except (OSError, asyncssh.Error, TimeoutError) as e:
                done, pid = None, f"{_why(e, self._command_timeout_s)}"
            pending.pop(worker.id)
            if not pid.isdigit():
                why = pid if done is None else _output(done)
                reason = f"could not start on host {target.entry}: {why}"
                log.warning("daemon %s (%s) %s", worker.name, worker.id, reason)
                self._on_exit(worker, None, reason, False)
                continue
            log.info(
                "started daemon %s (%s) on host %s as pid %s",
                worker.name,
                worker.id,
                target.entry,
                pid,
            )
            log.debug("daemon %s runs %s", worker.name, " ".join(argv))
            self._on_placed(worker, {"host": target.entry, "pid": pid})

    async def _await_end(
        self,
        conn: asyncssh.SSHClientConnection,
        cfg: SshConfig,
        worker: Worker,
        entry: str,
        pid: str,
    ) -> None:
        try:
            script = scripts.await_end(cfg, worker, pid, self._stop_timeout_s)
            async with asyncio.timeout(self._stop_timeout_s + self._command_timeout_s):
                done = await conn.run(scripts.command(script), check=False)
            said = _last_word(done)
        except (OSError, asyncssh.Error, TimeoutError) as e:
            said = ""
            log.warning(
                "lost sight of daemon %s (%s) on host %s while it stopped: %s",
                worker.name,
                worker.id,
                entry,
                _why(e, self._stop_timeout_s + self._command_timeout_s),
            )
        finally:
            conn.close()
        if said == "killed":
            reason = (
                f"killed by SIGKILL on host {entry} (pid {pid}) after {self._stop_timeout_s:g} s"
            )
            log.warning("daemon %s (%s) did not stop in time: %s", worker.name, worker.id, reason)
        elif said == "ended":
            reason = f"stopped by SIGTERM on host {entry} (pid {pid})"
            log.info("daemon %s (%s) ended on host %s (pid %s)", worker.name, worker.id, entry, pid)
        else:
            reason = f"sent SIGTERM on host {entry} (pid {pid}); its end was not seen"
        self._on_exit(worker, None, reason, True)

    async def _connect(self, cfg: SshConfig, target: Target) -> asyncssh.SSHClientConnection:
        options: dict[str, Any] = {"port": target.port, "connect_timeout": cfg.connect_timeout_s}
        if target.user is not None:
            options["username"] = target.user
        if cfg.identity_file is not None:
            options["client_keys"] = [os.path.expanduser(cfg.identity_file)]
        if cfg.insecure_no_host_key_check:
            options["known_hosts"] = None
        else:
            # Always a path: asyncssh's own default follows ~/.ssh/config, where
            # ``UserKnownHostsFile none`` would turn checking off.
            path = os.path.expanduser(
                cfg.known_hosts if isinstance(cfg.known_hosts, str) else DEFAULT_KNOWN_HOSTS
            )
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"known_hosts file {path} does not exist on the control plane's host; "
                    f"add the host's key to it (ssh-keyscan -p {target.port} {target.host})"
                )
            options["known_hosts"] = path
        # The connect timeout bounds the TCP and SSH handshakes; this bounds the rest too.
        async with asyncio.timeout(cfg.connect_timeout_s + 1):
            return await asyncssh.connect(target.host, **options)

    async def _run(
        self, conn: asyncssh.SSHClientConnection, script: str, stdin: str | None = None
    ) -> asyncssh.SSHCompletedProcess:
        async with asyncio.timeout(self._command_timeout_s):
            return await conn.run(scripts.command(script), input=stdin, check=False)


def _why(error: BaseException, timeout_s: float) -> str:
    """What went wrong, for a reason; ``timeout_s``: the bound a bare timeout hit."""
    if isinstance(error, TimeoutError) and not str(error):
        return f"timed out after {timeout_s:g} s"
    text = str(error) or type(error).__name__
    if isinstance(error, asyncssh.HostKeyNotVerifiable):
        text += " (add the host's key to known_hosts)"
    return text


def _output(done: asyncssh.SSHCompletedProcess) -> str:
    text = " | ".join(line.strip() for line in str(done.stderr or "").splitlines() if line.strip())
    return text or f"exit status {done.exit_status}"


def _last_word(done: asyncssh.SSHCompletedProcess) -> str:
    """What a script printed last (a login script may print before the command runs)."""
    words = str(done.stdout or "").split()
    return words[-1] if words else ""
