"""Finding and killing every process of one run, also those that left its process group.

A command runs in a process group of its own, so a signal to the group reaches what a
shell started. A descendant that calls ``setsid`` (or ``setpgid``), as daemonising code and
``setsid sleep 1000 &`` do, leaves the group; one that double-forks is reparented to
init (or the nearest subreaper) and is no longer a child of anything the daemon knows.

The mark: every run's environment carries ``LAKESHORE_RUN=<mark>``, a value unique to the
run, and every descendant inherits it whatever group, session or parent it ends up in.
:class:`RunProcesses` signals the group and every process whose ``/proc/<pid>/environ``
carries the mark. The daemon does this at the end of every run, however it ended: a run
is over when its main process is gone, and what it left behind is killed then.

Why not the alternatives:

- ``prctl(PR_SET_CHILD_SUBREAPER)`` makes orphans children of the daemon, but it changes
  how the whole daemon process reaps children, which fights asyncio's child watcher (a
  ``waitpid(-1)`` loop would steal its children's statuses) and every test process that
  hosts an in-process daemon; it also needs a walk of the tree to find what is left.
- A cgroup per run is exact, but needs a delegated cgroup v2 subtree, which a daemon
  started from a login shell, a container or Slurm seldom has.

Limits, by design of the mark: a descendant that execs with a cleared or rewritten
environment (``env -i``, ``execle`` with a fresh env) carries no mark and is found only
while it stays in the group; one that changed its user (setuid) cannot be read or killed;
one in another PID namespace (a container it started) is not seen. Only Linux has
``/proc/<pid>/environ``: elsewhere only the group is signalled.

A scan reads the environment of every process the daemon may read, about 10 µs each
(under a millisecond for 80 processes; it runs on the event loop, once when a run ends and
once per signal of a stop).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys

#: The variable that marks a run's processes.
RUN_MARK = "LAKESHORE_RUN"
#: The variable that marks every run of one daemon (:class:`Watchdog`).
DAEMON_MARK = "LAKESHORE_DAEMON"
#: Scans of a SIGKILL: a process killed while it forked may leave a child that the scan
#: before missed; scanning until one finds nothing new catches it, within this bound.
_KILL_ROUNDS = 8
_PROC = "/proc"


def marked(mark: str) -> list[int]:
    """The pids whose environment has ``LAKESHORE_RUN=<mark>`` (never this process)."""
    return _carrying(_needle(mark))


def _carrying(needle: bytes) -> list[int]:
    me = os.getpid()
    try:
        names = os.listdir(_PROC)
    except OSError:
        return []  # no /proc: the group is all there is to signal
    return [
        int(name)
        for name in names
        if name.isdigit() and int(name) != me and _carries(int(name), needle)
    ]


def signal_marked(mark: str, signum: int) -> list[int]:
    """Send ``signum`` to every process carrying ``mark``; the pids signalled.

    Each is signalled through a pidfd opened before its mark is read again, so a pid that
    exited and was reused by another process between the scan and the signal is spared.
    """
    return _signal_carrying(_needle(mark), signum)


def _signal_carrying(needle: bytes, signum: int, spare_group: int | None = None) -> list[int]:
    """Signal every process carrying ``needle``, but those of ``spare_group`` (a group just
    signalled as a whole: each process gets a stop's SIGTERM once)."""
    sent = []
    for pid in _carrying(needle):
        if spare_group is not None and _group_of(pid) == spare_group:
            continue
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        except (AttributeError, OSError):  # no pidfds (old kernel): the plain signal
            if _carries(pid, needle):
                _kill(pid, signum)
                sent.append(pid)
            continue
        try:
            if _carries(pid, needle):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    signal.pidfd_send_signal(fd, signum)
                sent.append(pid)
        finally:
            os.close(fd)
    return sent


def _needle(mark: str, var: str = RUN_MARK) -> bytes:
    return f"{var}={mark}\0".encode()


def _carries(pid: int, needle: bytes) -> bool:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False  # gone meanwhile, or not ours to read
    # Entries are NUL-terminated: a match at the start or after a NUL is a whole entry.
    return env.startswith(needle) or b"\0" + needle in env


class RunProcesses:
    """The processes of one run: its process group and every process carrying its mark.

    Args:
        pgid: the run's process group (its main process's pid).
        mark: the run's ``LAKESHORE_RUN`` value.
    """

    def __init__(self, pgid: int, mark: str) -> None:
        self.pgid, self.mark = pgid, mark

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the group and to every marked process outside it (once each:
        a handler must not see a stop's SIGTERM twice)."""
        _kill_group(self.pgid, signum)
        _signal_carrying(_needle(self.mark), signum, spare_group=self.pgid)

    def kill(self, *, group: bool = True) -> int:
        """SIGKILL the group (unless ``group`` is false: a worker process that lives on)
        and every marked process, scanning again until a scan finds none it has not killed
        yet (bounded); how many marked processes were killed."""
        if group:
            _kill_group(self.pgid, signal.SIGKILL)
        return _kill_carrying(_needle(self.mark))


def _kill_carrying(needle: bytes) -> int:
    """SIGKILL every process carrying ``needle``, scanning again until a scan finds none
    it has not killed yet (bounded); how many were killed."""
    killed: set[int] = set()
    for _ in range(_KILL_ROUNDS):
        # A killed process stays readable until the kernel has torn it down (killing it
        # again is harmless): a scan that finds only those is the last.
        found = set(_signal_carrying(needle, signal.SIGKILL))
        if not found - killed:
            break
        killed |= found
    return len(killed)


class Watchdog:
    """A small process that outlives its daemon to end what the daemon's runs left.

    A daemon ends its runs' processes when it stops, and a worker process dies with it
    (``PR_SET_PDEATHSIG``); but a SIGKILLed daemon ends nothing, and a command, or what a
    run started in a session of its own, would go on beside the redelivery of its
    invocation. So every run of a daemon carries ``LAKESHORE_DAEMON=<mark>`` (:attr:`mark`,
    unique to the daemon), and the watchdog holds the read end of a pipe whose only writer
    is the daemon: when it reads the pipe's end (the daemon exited, however — the kernel
    closes a killed process's descriptors) it SIGKILLs every process carrying the mark and
    exits. It runs this file as a script (the standard library only, no site packages: a
    few milliseconds to start), in a session of its own, so a signal to the daemon's
    group (a terminal's Ctrl-C) leaves it be.

    Linux only (marks are read from ``/proc``); elsewhere :meth:`start` starts nothing.
    """

    def __init__(self) -> None:
        self.mark = secrets.token_hex(8)
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self._proc is not None or not sys.platform.startswith("linux"):
            return
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, self.mark],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def close(self) -> None:
        """The daemon stops: the watchdog ends what is left of its runs and exits (waited
        for, a few seconds at most)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _watch(mark: str) -> None:
    """The watchdog's process: wait for the pipe's end, then kill what carries ``mark``."""
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    _kill_carrying(_needle(mark, DAEMON_MARK))


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _kill_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


if __name__ == "__main__":
    _watch(sys.argv[1])
