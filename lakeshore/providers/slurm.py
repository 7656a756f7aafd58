"""The ``slurm`` backend: one daemon per Slurm job, submitted with ``sbatch --wrap``.

A launch submits one job per worker row, ``exec lakeshore daemon run …`` with the row's
flags; the daemon's NATS credential (and CA) travel in sbatch's environment, which Slurm
hands to the job (``--export=ALL``), never on a command line. The job is the row's
placement, ``{"slurm_job": "17", "slurm_state": "RUNNING", "partition": "gpu", "node":
"gpu3", "log": …}`` (the poll below keeps it up to date): that is how
:meth:`SlurmProvider.stop` finds the job again, also after a restart of the control plane
(``scancel``: Slurm sends SIGTERM, the daemon drains, ``KillWait`` later SIGKILL).

One poll task, owned by the backend, asks ``squeue`` every ``poll_s`` about the jobs it
submitted (or stopped) and reports each one that ended through the exit callback, so a
job that fails before its daemon registers is lost at once rather than after the launch
timeout. The set is in memory: after a restart, heartbeats alone tell whether the daemons
of earlier jobs live. Closing the backend stops its tasks, never the jobs (their daemons
join the restarted control plane).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakeshore.errors import Unavailable
from lakeshore.model import QUEUED, DaemonAccess, Provider, Worker
from lakeshore.providers import exits
from lakeshore.providers import slurm_commands as commands
from lakeshore.providers.base import AccessFor, ExitCallback, PlacedCallback
from lakeshore.providers.local import daemon_argv, daemon_env
from lakeshore.providers.slurm_commands import ENDED, JobState
from lakeshore.providers.slurm_config import SlurmConfig, command_env, parse_config, sbatch_argv

log = logging.getLogger(__name__)

#: Seconds between two polls while no job is watched.
_IDLE_POLL_S = 5.0


@dataclass(slots=True, eq=False)
class _Job:
    """A job this backend watches until it ends."""

    worker: Worker
    job_id: str
    config: SlurmConfig
    placement: dict[str, str]
    log_path: Path | None = None
    #: the backend scancelled it
    requested: bool = False


class SlurmProvider:
    """Submits, watches and cancels the Slurm jobs that run daemons.

    Args:
        log_dir: the default parent of the jobs' output (``<log_dir>/<namespace>``).
        on_exit: called once per job that ended (or could not be submitted).
        on_placed: called with a job's placement once submitted, and when it changes
            (the job started on a node).
        flags: given to every daemon (:func:`~lakeshore.providers.local.daemon_flags`).
        command_timeout_s: the bound of one sbatch, squeue or scancel call.
        close_timeout_s: at shutdown, how long submissions under way may finish.
    """

    def __init__(
        self,
        log_dir: Path,
        on_exit: ExitCallback,
        on_placed: PlacedCallback,
        *,
        flags: Sequence[str] = (),
        command_timeout_s: float = 60.0,
        close_timeout_s: float = 5.0,
    ) -> None:
        self._log_dir = Path(log_dir)
        self._on_exit, self._on_placed = on_exit, on_placed
        self._flags = tuple(flags)
        self._command_timeout_s = command_timeout_s
        self._close_timeout_s = close_timeout_s
        #: watched jobs by (slurm_conf, job id): two clusters may both have a job 17
        self._jobs: dict[tuple[str | None, str], _Job] = {}
        self._submits: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None
        #: set when a job is watched: the poll task looks at its poll_s
        self._added = asyncio.Event()

    def check_config(self, config: dict[str, Any]) -> None:
        parse_config(config)

    def check_launch(
        self, provider: Provider, *, names: Sequence[str] = (), queues: Sequence[str] = ()
    ) -> None:
        """Refuses a launch this host cannot submit.

        Raises:
            Invalid: the row's config (written by an older server?) is not valid.
            Unavailable: ``sbatch`` is not on this control plane's ``PATH``.
        """
        parse_config(provider.config)
        if shutil.which("sbatch") is None:
            raise Unavailable(
                f"cannot launch on provider {provider.name!r}: sbatch is not on the control "
                "plane's PATH; the slurm provider submits from the control plane's host — "
                "install Slurm's client commands there (Debian: apt-get install slurm-client) "
                "and point the provider's slurm_conf at the cluster's slurm.conf"
            )

    def daemons(self) -> list[Worker]:
        return []

    def watched(self) -> list[str]:
        """The ids of the jobs whose end this backend waits for."""
        return [job.job_id for job in self._jobs.values()]

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        """Mint each daemon's access now and submit the jobs in a task of this backend."""
        config = parse_config(provider.config)
        grants = [(w, access(w)) for w in workers]
        task = asyncio.create_task(
            self._submit_all(config, grants), name=f"slurm-submit:{provider.name}"
        )
        self._submits.add(task)
        task.add_done_callback(self._submits.discard)
        self._start_polling()

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        """``scancel`` the worker's job (``placement["slurm_job"]``); its end is then reported
        as requested.

        Returns:
            ``False`` when the row has no job, or Slurm knows no running job of that id.

        Raises:
            Unavailable: scancel failed (e.g. slurmctld does not answer).
        """
        job_id = worker.placement.get("slurm_job")
        if not job_id:
            return False
        config = parse_config(provider.config)
        job = self._jobs.get((config.slurm_conf, job_id))
        # Started before a restart of the control plane: watched from now on.
        watch = job is None
        job = job or _Job(worker, job_id, config, dict(worker.placement))
        # Marked first: the poll may see the job end as soon as scancel is sent.
        before, job.requested = job.requested, True
        try:
            cancelled = await self._scancel(config, job_id)
        except BaseException:
            job.requested = before
            raise
        if not cancelled:
            job.requested = before
            return False
        if watch:
            self._watch(job)
        log.info("daemon %s (%s): slurm job %s cancelled", worker.name, worker.id, job_id)
        return True

    async def _scancel(self, config: SlurmConfig, job_id: str) -> bool:
        """Whether Slurm took the cancel of a job that runs (or is ending already)."""
        try:
            code, _, err = await self._run(["scancel", "--verbose", job_id], command_env(config))
        except (OSError, TimeoutError) as e:
            raise Unavailable(f"scancel {job_id} failed: {e or 'no answer'}") from None
        if "Invalid job id" in err:
            return False
        if "already completing or completed" in err:
            states = await self._states(config, [job_id])
            seen = None if states is None else states.get(job_id)
            return seen is not None and seen.state == "COMPLETING"
        if code != 0:
            why = commands.oneline(err) or f"exit code {code}"
            raise Unavailable(f"scancel {job_id} failed: {why}")
        return True

    async def close(self) -> None:
        """Let submissions under way finish within ``close_timeout_s``, then cancel them and
        the poll task (the jobs keep running)."""
        if self._submits:
            await asyncio.wait(set(self._submits), timeout=self._close_timeout_s)
        tasks = [*self._submits, *([self._poller] if self._poller else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._poller = None

    # ---- submitting -------------------------------------------------------------------

    async def _submit_all(self, config: SlurmConfig, grants: list[tuple[Worker, DaemonAccess]]):
        for worker, given in grants:
            try:
                await self._submit(config, worker, given)
            except Exception as e:
                log.exception("cannot submit daemon %s (%s)", worker.name, worker.id)
                self._on_exit(worker, None, f"could not submit its slurm job: {e}", False)

    async def _submit(self, config: SlurmConfig, worker: Worker, given: DaemonAccess) -> None:
        python = config.python or sys.executable
        command = [python, "-m", "lakeshore", "daemon", "run"]
        argv = daemon_argv(command, worker, config.nats_url or given.nats_url, self._flags)
        if config.log_dir is None:
            log_dir = self._log_dir / worker.namespace
            # The jobs' output holds command lines and output: the server's user's only.
            log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            log_dir = Path(config.log_dir)
        sbatch = sbatch_argv(config, worker, log_dir, argv)
        try:
            code, out, err = await self._run(sbatch, command_env(config, daemon_env(given)))
        except (OSError, TimeoutError) as e:
            why = str(e) or f"no answer within {self._command_timeout_s:g}s"
            log.error("sbatch for daemon %s (%s) failed: %s", worker.name, worker.id, why)
            self._on_exit(worker, None, f"sbatch failed: {why}", False)
            return
        job_id = out.strip().split(";", 1)[0]
        if code != 0 or not job_id.isdigit():
            why = commands.oneline(err) or f"exit code {code}, output {out.strip()!r}"
            log.error("sbatch refused daemon %s (%s): %s", worker.name, worker.id, why)
            self._on_exit(worker, None, f"sbatch refused the job: {why}", False)
            return
        log_path = log_dir / f"{worker.name}-{job_id}.log"
        # Queued until squeue says otherwise: a pending job's launch is not timed.
        placement = {"slurm_job": job_id, "log": str(log_path), QUEUED: "true"}
        if config.partition is not None:
            placement["partition"] = config.partition
        self._watch(_Job(worker, job_id, config, placement, log_path))
        log.info("daemon %s (%s) submitted as slurm job %s", worker.name, worker.id, job_id)
        self._on_placed(worker, placement)

    # ---- watching ---------------------------------------------------------------------

    def _watch(self, job: _Job) -> _Job:
        self._jobs[(job.config.slurm_conf, job.job_id)] = job
        self._added.set()
        self._start_polling()
        return job

    def _start_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll_forever(), name="slurm-poll")

    async def _poll_forever(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            # The shortest poll_s among the watched jobs, from the last poll; a job watched
            # since (``_added``) may shorten it.
            every = min((job.config.poll_s for job in self._jobs.values()), default=_IDLE_POLL_S)
            delay = last + every - loop.time()
            if delay > 0:
                self._added.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._added.wait()
                continue
            last = loop.time()
            try:
                await self._poll()
            except Exception:
                log.exception("polling slurm for ended jobs failed (retried)")

    async def _poll(self) -> None:
        clusters: dict[str | None, list[_Job]] = {}
        for job in self._jobs.values():
            clusters.setdefault(job.config.slurm_conf, []).append(job)
        for jobs in clusters.values():
            states = await self._states(jobs[0].config, [job.job_id for job in jobs])
            if states is None:
                continue
            for job in jobs:
                self._observe(job, states.get(job.job_id))

    def _observe(self, job: _Job, seen: JobState | None) -> None:
        """Report ``job``'s new placement (state, partition, node), then its end, from its
        squeue row (``None``: it left the queue)."""
        if seen is not None:
            placement = {**job.placement, "slurm_state": seen.state}
            if seen.partition:
                placement["partition"] = seen.partition
            if seen.nodes and seen.state != "PENDING":
                placement["node"] = seen.nodes
                placement.pop(QUEUED, None)
            else:
                placement.pop("node", None)  # pending (again: requeued)
                placement[QUEUED] = "true"
            if placement != job.placement:
                job.placement = placement
                self._on_placed(job.worker, placement)
        if seen is None or seen.state in ENDED:
            self._ended(job, seen)

    def _ended(self, job: _Job, seen: JobState | None) -> None:
        self._jobs.pop((job.config.slurm_conf, job.job_id), None)
        w = job.worker
        if seen is None:
            code, reason = None, f"slurm job {job.job_id} left the queue (state unknown)"
        else:
            code, reason = seen.returncode(), f"slurm job {job.job_id} {seen.state}"
            if seen.state != "COMPLETED" and code is not None:
                reason += f" ({exits.describe(code)})"
        if job.requested or code == 0:
            log.info("daemon %s (%s) ended: %s", w.name, w.id, reason)
        else:
            tail = exits.tail(job.log_path) if job.log_path else ""
            reason += f"; last output: {tail}" if tail else ""
            log.warning("daemon %s (%s) %s (log: %s)", w.name, w.id, reason, job.log_path)
        self._on_exit(w, code, reason, job.requested)

    async def _states(self, config: SlurmConfig, job_ids: list[str]) -> dict[str, JobState] | None:
        return await commands.squeue(job_ids, command_env(config), self._command_timeout_s)

    async def _run(self, argv: list[str], env: Mapping[str, str] | None) -> tuple[int, str, str]:
        return await commands.run(argv, env, self._command_timeout_s)
