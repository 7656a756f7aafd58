"""Slurm's commands as the ``slurm`` backend uses them: run without a shell, bounded in
time, and what their answers mean (job states, wait statuses)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
from collections.abc import Mapping
from typing import NamedTuple

log = logging.getLogger(__name__)

#: Job states after which a job runs nothing any more; ``COMPLETING`` is not one: its
#: processes are still being signalled (``KillWait``).
ENDED = frozenset(
    {
        "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
        "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED",
    }
)  # fmt: skip
#: ``squeue --Format``: id, state, partition, nodes, wait status; ``|``-separated.
_FORMAT = "JobID:|,State:|,Partition:|,NodeList:|,exit_code:"


class JobState(NamedTuple):
    """A job as squeue shows it."""

    state: str
    partition: str
    #: empty while pending
    nodes: str
    #: the wait status of the job's script, as ``waitpid`` reports it
    status: str

    def returncode(self) -> int | None:
        """The script's exit code (negative: the signal that ended it); 0 only when
        ``COMPLETED`` (a cancelled job's status may read 0 too), ``None`` when unknown."""
        if self.state == "COMPLETED":
            return 0
        if not self.status.isdigit() or int(self.status) == 0:
            return None
        raw = int(self.status)
        return -(raw & 0x7F) if raw & 0x7F else raw >> 8


async def run(
    argv: list[str], env: Mapping[str, str] | None, timeout_s: float
) -> tuple[int, str, str]:
    """Run a command (no shell) within ``timeout_s``: ``(exit code, stdout, stderr)``.

    Raises:
        OSError: it could not be started (not installed?).
        TimeoutError: it did not end in time (it was killed).
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def squeue(
    job_ids: list[str], env: Mapping[str, str] | None, timeout_s: float
) -> dict[str, JobState] | None:
    """The state of each of ``job_ids`` that Slurm still knows (ended jobs stay known for
    its ``MinJobAge``); ``None`` when squeue did not answer: nothing can be concluded."""
    argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}"]
    try:
        code, out, err = await run([*argv, f"--Format={_FORMAT}"], env, timeout_s)
    except (OSError, TimeoutError) as e:
        log.warning("squeue failed (retried): %s", str(e) or "no answer")
        return None
    if code != 0:
        # One unknown id (and only then) is an error rather than an empty answer.
        if "Invalid job id" in err:
            return {}
        log.warning("squeue failed (retried): %s", oneline(err) or f"exit code {code}")
        return None
    states = {}
    for line in out.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) == 5:
            states[fields[0]] = JobState(*fields[1:])
    return states


def oneline(text: str) -> str:
    """A command's output on one line (its lines joined with `` | ``)."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())
