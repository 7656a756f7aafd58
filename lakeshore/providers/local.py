"""The ``local`` backend: daemons as subprocesses of the control plane, on its host.

One ``lakeshore daemon run`` process per worker row, with the row's id, name, namespace,
queues and labels on its command line. Each process writes its output to
``<log_dir>/<namespace>/<name>.log`` (appended, so a relaunch keeps the earlier runs) and
has one watcher task, owned by this backend, that reports its end through the exit
callback. Children run in their own session: a Ctrl-C on the server's terminal reaches
the server, whose shutdown (:meth:`LocalProvider.close`) stops them — one SIGTERM, so a
daemon drains rather than being interrupted. A server that dies without a shutdown (kill
-9) cannot stop them: each daemon is started with ``--orphan-after-s``, so it retires by
itself once its heartbeats have gone unanswered that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakeshore.model import DaemonAccess, Provider, Worker, now
from lakeshore.providers import exits
from lakeshore.providers.base import AccessFor, ExitCallback
from lakeshore.providers.capacity import check_gpu_config

log = logging.getLogger(__name__)

#: Where a started daemon finds its NATS credential and the CA of NATS's certificate.
CREDENTIAL_ENV = "LAKESHORE_NATS_CREDENTIAL"
CA_ENV = "LAKESHORE_NATS_CA"
#: ``lakeshore daemon run`` with this very interpreter (and so this very lakeshore).
DAEMON_COMMAND = (sys.executable, "-m", "lakeshore", "daemon", "run")
#: A started daemon whose heartbeats go unanswered this long retires (seconds).
ORPHAN_AFTER_S = 60.0


def daemon_flags(
    *, heartbeat_s: float | None = None, log_max_bytes: int | None = None
) -> list[str]:
    """The flags every daemon a control plane starts is given: its heartbeat and the cap of
    a run's live log (the server's ``log_max_bytes``); ``None``: the daemon's default."""
    flags = []
    if heartbeat_s is not None:
        flags += ["--heartbeat-s", f"{heartbeat_s:g}"]
    if log_max_bytes is not None:
        flags += ["--log-max-bytes", str(log_max_bytes)]
    return flags


def daemon_argv(
    command: Sequence[str],
    worker: Worker,
    nats_url: str,
    flags: Sequence[str] = (),
    *,
    orphan_after_s: float | None = None,
) -> list[str]:
    """The command line that runs ``worker`` as a daemon (``queues == []``: no ``--queue``,
    so the daemon pulls from the default queue), with ``flags`` (:func:`daemon_flags`). Its
    credential is not on the command line (anyone on the host can read that) but in its
    environment (:func:`daemon_env`). ``orphan_after_s``: the daemon retires once its
    heartbeats go unanswered that long (``None``: it waits for its control plane for
    ever)."""
    argv = [*command, "--id", worker.id, "--name", worker.name, "--namespace", worker.namespace]
    for q in worker.queues:
        argv += ["--queue", q]
    for key, value in worker.labels.items():
        argv += ["--label", f"{key}={value}"]
    if worker.launched_with is not None:
        argv += worker.launched_with.flags()
    argv += ["--nats-url", nats_url, "--provider", worker.provider]
    if worker.managed:
        argv.append("--managed")
    argv += flags
    if orphan_after_s is not None:
        argv += ["--orphan-after-s", f"{orphan_after_s:g}"]
    return argv


def daemon_env(access: DaemonAccess) -> dict[str, str]:
    """The environment of a daemon the control plane starts: its own, plus its NATS
    credential and CA (read by ``lakeshore daemon run``)."""
    env = {**os.environ, CREDENTIAL_ENV: access.credential}
    env.pop(CA_ENV, None)
    if access.ca_pem is not None:
        env[CA_ENV] = access.ca_pem
    return env


@dataclass(slots=True, eq=False)
class _Child:
    worker: Worker
    proc: asyncio.subprocess.Process
    log_path: Path
    #: the provider asked it to stop (stop() or close())
    stopping: bool = False
    kill_timer: asyncio.TimerHandle | None = None
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)


class LocalProvider:
    """Starts, watches and stops daemon subprocesses on this host.

    Args:
        log_dir: where the daemons' logs go (``<log_dir>/<namespace>/<name>.log``).
        on_exit: called once per process when it has ended (or could not start).
        command: the daemon command without its per-worker flags (tests swap it).
        flags: given to every daemon (:func:`daemon_flags`).
        orphan_after_s: passed to every daemon as ``--orphan-after-s``: it retires once its
            heartbeats go unanswered this long, so it does not outlive a killed server.
        stop_timeout_s: after SIGTERM, how long a daemon may drain before SIGKILL.
        close_timeout_s: at shutdown, the same bound for all daemons together.
    """

    def __init__(
        self,
        log_dir: Path,
        on_exit: ExitCallback,
        *,
        command: Sequence[str] = DAEMON_COMMAND,
        flags: Sequence[str] = (),
        orphan_after_s: float = ORPHAN_AFTER_S,
        stop_timeout_s: float = 30.0,
        close_timeout_s: float = 5.0,
    ) -> None:
        self._log_dir = Path(log_dir)
        self._on_exit = on_exit
        #: the daemon command without its per-worker flags (read at each launch)
        self.command = tuple(command)
        self._flags = tuple(flags)
        self._orphan_after_s = orphan_after_s
        self._stop_timeout_s = stop_timeout_s
        self._close_timeout_s = close_timeout_s
        self._children: dict[str, _Child] = {}

    def log_path(self, worker: Worker) -> Path:
        return self._log_dir / worker.namespace / f"{worker.name}.log"

    def daemons(self) -> list[Worker]:
        """The workers whose process runs now (started and not yet reported ended)."""
        return [child.worker for child in self._children.values()]

    def pid(self, worker_id: str) -> int | None:
        """The process id of a running daemon this backend started, else ``None``."""
        child = self._children.get(worker_id)
        return None if child is None else child.proc.pid

    async def wait_exited(self, worker_id: str) -> int | None:
        """Wait until the daemon's process has ended and been reported to the exit callback.

        Returns:
            Its exit code (negative: the signal that killed it), or ``None`` when this
            backend runs no process for ``worker_id``.
        """
        child = self._children.get(worker_id)
        if child is None or child.watcher is None:
            return None
        await asyncio.shield(child.watcher)
        return child.proc.returncode

    def check_config(self, config: dict[str, Any]) -> None:
        """A local provider reads ``gpus`` and ``gpu_type`` (what each daemon has:
        :mod:`.capacity`); any other setting is kept as given."""
        check_gpu_config(config)

    def check_launch(
        self, provider: Provider, *, names: Sequence[str] = (), queues: Sequence[str] = ()
    ) -> None:
        """Local launches are always possible."""

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        for worker in workers:
            given = access(worker)
            argv = daemon_argv(
                self.command,
                worker,
                given.nats_url,
                self._flags,
                orphan_after_s=self._orphan_after_s,
            )
            path = self.log_path(worker)
            try:
                # Logs hold command lines and output: readable by the server's user only.
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                with os.fdopen(fd, "ab") as out:
                    header = f"{exits.HEADER_PREFIX}{now().isoformat()} launched: {' '.join(argv)}"
                    out.write(f"{header}\n".encode())
                    out.flush()
                    proc = await asyncio.create_subprocess_exec(
                        *argv,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        env=daemon_env(given),
                    )
            except OSError as e:
                log.error("cannot start daemon %s (%s): %s", worker.name, worker.id, e)
                self._on_exit(worker, None, f"could not start: {e}", False)
                continue
            child = _Child(worker, proc, path)
            self._children[worker.id] = child
            child.watcher = asyncio.create_task(self._watch(child), name=f"daemon:{worker.name}")
            log.info("started daemon %s (%s) as pid %d", worker.name, worker.id, proc.pid)

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        """SIGTERM now, SIGKILL after ``stop_timeout_s`` if it is still running."""
        child = self._children.get(worker.id)
        if child is None:
            return False
        if not child.stopping:
            _terminate(child)
            loop = asyncio.get_running_loop()
            child.kill_timer = loop.call_later(self._stop_timeout_s, _kill, child)
        return True

    async def close(self) -> None:
        """SIGTERM every daemon, SIGKILL those still running after ``close_timeout_s``."""
        children = list(self._children.values())
        if not children:
            return
        for child in children:
            _terminate(child)
        watchers = {c.watcher for c in children if c.watcher is not None}
        _, pending = await asyncio.wait(watchers, timeout=self._close_timeout_s)
        if pending:
            log.warning("%d daemon(s) still running after SIGTERM; killing them", len(pending))
            for child in children:
                _kill(child)
            _, pending = await asyncio.wait(pending, timeout=self._close_timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _watch(self, child: _Child) -> None:
        code = await child.proc.wait()
        if child.kill_timer is not None:
            child.kill_timer.cancel()
        self._children.pop(child.worker.id, None)
        w = child.worker
        reason = exits.describe(code)
        if child.stopping or code == 0:
            log.info("daemon %s (%s) ended: %s", w.name, w.id, reason)
        else:
            tail = exits.tail(child.log_path)
            reason += f"; last output: {tail}" if tail else ""
            log.warning("daemon %s (%s) %s (log: %s)", w.name, w.id, reason, child.log_path)
        self._on_exit(w, code, reason, child.stopping)


def _terminate(child: _Child) -> None:
    child.stopping = True
    with contextlib.suppress(ProcessLookupError):
        child.proc.terminate()


def _kill(child: _Child) -> None:
    if child.proc.returncode is None:
        w = child.worker
        log.warning("daemon %s (%s) did not stop in time; killing it", w.name, w.id)
        with contextlib.suppress(ProcessLookupError):
            child.proc.kill()
