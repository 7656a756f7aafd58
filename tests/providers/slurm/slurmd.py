"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd in a temp dir.

Debian's slurm-wlm (22.05) and munge, run as root: a munged with a generated key on its
own socket, a slurm.conf on free ports whose node claims 16 CPUs (so more jobs than this
machine has cores run at once), state, spool, pid and log files all under the temp dir.
Nothing outside the temp dir is read or written, so it runs beside a real cluster.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

#: The binaries the cluster needs; a missing one fails the suite (never skips it).
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
#: How long the cluster may take to come up, and its processes to stop.
START_S = 60.0
STOP_S = 10.0
PARTITION = "debug"
#: GPUs the test node declares, of type h100 (gres on empty files: no GPU here)
GPUS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check: Callable[[], bool], timeout_s: float, what: str, why: Callable[[], str]) -> None:
    """Poll ``check`` every 0.05 s until it holds; after ``timeout_s`` fail saying ``what``
    was awaited and ``why()`` (the logs)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {timeout_s:g}s for {what}\n{why()}")
        time.sleep(0.05)


def missing() -> str | None:
    """Why this machine cannot run the cluster (not root, binaries missing), else ``None``."""
    if os.geteuid() != 0:
        return "the Slurm tests run slurmd, which must run as root (CI runs as root)"
    absent = [name for name in BINARIES if _which(name) is None]
    if absent:
        return (
            f"the Slurm tests need {', '.join(absent)}: run scripts/system-deps (it runs "
            "`apt-get install -y slurm-wlm munge`: Debian's Slurm 22.05 and munge)"
        )
    return None


def _which(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin")


class SlurmCluster:
    """munged + slurmctld + slurmd on this host, configured under ``root``.

    ``conf`` is the slurm.conf to hand to the provider (``slurm_conf``) and to every
    Slurm command (``SLURM_CONF``, see :meth:`run`).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        #: seconds from the first process started to the node idle
        self.started_in_s = 0.0

    # ---- life -------------------------------------------------------------------------

    def start(self) -> None:
        t0 = time.monotonic()
        for sub in ("state", "spool", "munge"):
            (self.root / sub).mkdir(mode=0o755, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(128))
        socket_path = self.root / "munge" / "munge.socket"
        self.conf.write_text(self._config(socket_path))
        # Four GPUs the node declares, each on an empty file (no GPU here): Slurm counts and
        # allocates them (``--gres=gpu:2``) like real ones, and drops any GPU without a file.
        devices = self.root / "dev"
        devices.mkdir()
        for i in range(GPUS):
            (devices / f"nvidia{i}").touch()
        (self.root / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={self.node} Name=gpu Type=h100 "
            f"File={devices}/nvidia[0-{GPUS - 1}]\n"
        )
        # Its own key, not /etc/munge's; --force: munged's checks of the owners and modes of
        # its directories are for a system install (/etc/munge, /run/munge), not a temp dir.
        munge = self.root / "munge"
        self._spawn(
            "munged",
            ["munged", "--foreground", "--force", f"--key-file={key}"]
            + [f"--socket={socket_path}", f"--pid-file={munge}/munged.pid"]
            + [f"--seed-file={munge}/munged.seed", f"--log-file={munge}/munged.log"],
        )
        _wait(lambda: self._running() and socket_path.exists(), START_S, "munged", self.logs)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.node, "-f", str(self.conf)])
        _wait(self._idle, START_S, f"node {self.node} idle in sinfo", self.logs)
        self.started_in_s = time.monotonic() - t0

    def stop(self) -> None:
        """Cancel every job (bounded wait), then stop slurmd, slurmctld and munged."""
        try:
            if "slurmctld" in self._procs and self._alive("slurmctld"):
                self.cancel_all()
        finally:
            for name in ("slurmd", "slurmctld", "munged"):
                proc = self._procs.pop(name, None)
                if proc is None:
                    continue
                proc.terminate()
                try:
                    proc.wait(STOP_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(STOP_S)

    def _config(self, socket_path: Path) -> str:
        r = self.root
        return "\n".join(
            [
                "ClusterName=lakeshore-test",
                f"SlurmctldHost={self.node}(127.0.0.1)",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={socket_path}",
                f"StateSaveLocation={r}/state",
                f"SlurmdSpoolDir={r}/spool",
                f"SlurmctldPidFile={r}/slurmctld.pid",
                f"SlurmdPidFile={r}/slurmd.pid",
                f"SlurmctldLogFile={r}/slurmctld.log",
                f"SlurmdLogFile={r}/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
                "JobCompType=jobcomp/none",
                "MpiDefault=none",
                "MailProg=/bin/true",
                "ReturnToService=2",
                # SIGTERM to SIGKILL after a cancel; ended jobs stay visible to squeue 30 s.
                "KillWait=5",
                "MinJobAge=30",
                # The node claims 16 CPUs whatever this machine has.
                "SlurmdParameters=config_overrides",
                "GresTypes=gpu",
                f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs=16 Gres=gpu:h100:{GPUS} "
                "State=UNKNOWN",
                f"PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE "
                "State=UP",
                "",
            ]
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        # The child has its own copy of the file: ours is closed at once.
        with open(self.root / f"{name}.out", "wb") as out:
            self._procs[name] = subprocess.Popen(
                [_which(argv[0]) or argv[0], *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )

    def _alive(self, name: str) -> bool:
        return self._procs[name].poll() is None

    def _running(self) -> bool:
        """True, or the error of the first process that exited (with the logs)."""
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}\n{self.logs()}")
        return True

    def _idle(self) -> bool:
        self._running()
        done = self.run("sinfo", "--noheader", f"--nodes={self.node}", "--format=%T", check=False)
        return done.returncode == 0 and done.stdout.strip() == "idle"

    def logs(self) -> str:
        """The end of every daemon's output, for failure messages."""
        parts = []
        for path in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # ---- commands ---------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster (``SLURM_CONF``), bounded by 30 s."""
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        return done

    def jobs(self) -> dict[str, str]:
        """``{job id: state}`` of every job still in the queue (pending, running, completing)."""
        out = self.run("squeue", "--noheader", "--format=%i %T").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def state(self, job_id: str) -> str | None:
        """A job's state (``COMPLETED`` … while Slurm remembers it), else ``None``."""
        done = self.run(
            "squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%T", check=False
        )
        return done.stdout.strip() or None

    def show(self, job_id: str) -> str:
        """``scontrol show job`` and the job's batch script, as one text."""
        shown = self.run("scontrol", "show", "job", job_id).stdout
        script = self.run("scontrol", "write", "batch_script", job_id, "-").stdout
        return shown + script

    def cancel_all(self, timeout_s: float = 20.0) -> None:
        """Cancel every job until none is left (``KillWait`` bounds each one's end)."""

        def none_left() -> bool:
            ids = list(self.jobs())
            if ids:
                self.run("scancel", *ids)
            return not ids

        _wait(none_left, timeout_s, "every job to end", lambda: str(self.jobs()))
