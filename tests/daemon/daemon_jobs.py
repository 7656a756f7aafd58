"""Functions the daemons of the tests run (``fn="daemon_jobs:<name>"``)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

#: Set by the test that blocks a function; released at the test's end.
RELEASE = threading.Event()


def add(a: int, b: int) -> int:
    return a + b


def noop() -> None:
    return None


async def async_double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


class Boom(Exception):
    """An error type of the user's code, qualified by this module."""


def explode(message: str) -> None:
    raise Boom(message)


def block() -> str:
    """Runs until the test releases it (bounded, so a stray thread never outlives a run)."""
    RELEASE.wait(30)
    return "released"


def hang_first_time(marker: str) -> str:
    """Hangs (until its process dies) on the first run; returns at once after that."""
    path = pathlib.Path(marker)
    if path.exists():
        return "second run"
    path.touch()
    RELEASE.wait(60)
    return "first run"


def big(size: int) -> str:
    return "x" * size


def whoami() -> dict[str, object]:
    """Where it ran: its process, that process's parent, and the run's variables."""
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "job": os.environ.get("LAKESHORE_JOB_ID"),
        "attempt": os.environ.get("LAKESHORE_ATTEMPT"),
        "mark": "LAKESHORE_RUN" in os.environ,
        "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "order": os.environ.get("CUDA_DEVICE_ORDER"),
        "uuids": os.environ.get("LAKESHORE_GPUS"),
    }


def checkpointing(path: str) -> str:
    """Sleeps for an hour; a stop's ``RunStopped`` runs its ``finally``, which checkpoints.
    Its pid is written inside the ``try``: a stop that comes the moment the pid shows (a
    descheduled worker on a loaded machine) still finds the ``finally``."""
    try:
        pathlib.Path(path + ".pid").write_text(f"{os.getpid()}\n")
        time.sleep(3600)
    finally:
        pathlib.Path(path).write_text("step 7")
    return "never"


def catches_its_stop(path: str) -> str:
    """Sleeps for an hour; catches its stop by name (``lakeshore.RunStopped``), writes what
    it caught, and lets the stop go on."""
    import lakeshore

    try:
        pathlib.Path(path + ".pid").write_text(f"{os.getpid()}\n")
        time.sleep(3600)
    except lakeshore.RunStopped as e:
        pathlib.Path(path).write_text(f"{type(e).__module__}.{type(e).__qualname__}: {e}")
        raise
    return "never"


def sleeps(pid_path: str, deaf: bool = False) -> str:
    """Sleeps for an hour (``deaf``: with SIGTERM ignored, so only SIGKILL ends it)."""
    if deaf:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pathlib.Path(pid_path).write_text(f"{os.getpid()}\n")
    time.sleep(3600)
    return "never"


def crash_first_time(marker: str, how: str = "segv") -> str:
    """Its process dies on the first run (SIGSEGV, or ``os._exit(3)``); returns after."""
    path = pathlib.Path(marker)
    if path.exists():
        return "survived"
    path.touch()
    print("about to crash", file=sys.stderr, flush=True)
    if how == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGSEGV)
    return "unreachable"


def leaves_a_printer(pid_path: str) -> str:
    """Starts a process in a session of its own that keeps printing on the run's stdout, and
    returns as soon as it runs (it wrote its pid: a run over before its Python started would
    have it killed before it says who it is)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _PRINTER, pid_path], start_new_session=True, stdout=sys.stdout
    )
    print(f"started {child.pid}", flush=True)
    path = pathlib.Path(pid_path)
    _until(lambda: path.exists() and path.read_text().endswith("\n"), 30, f"a pid in {path}")
    return "left"


def hangs_with_a_child(pid_path: str) -> str:
    """Starts ``sleep`` in a session of its own, writes ``<its pid> <own pid>`` to
    ``pid_path``, and sleeps for an hour."""
    child = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    pathlib.Path(pid_path).write_text(f"{child.pid} {os.getpid()}\n")
    time.sleep(3600)
    return "woke"


_PRINTER = (
    "import os, sys, time, pathlib; pathlib.Path(sys.argv[1]).write_text(f'{os.getpid()}\\n')\n"
    "while True: print('still here', flush=True); time.sleep(0.01)"
)


def prints(text: str) -> str:
    print(text, flush=True)
    return text


def meet(directory: str, n: int) -> int:
    """Waits (at most 30 s) until ``n`` runs of it are running at once; its pid."""
    here = pathlib.Path(directory)
    (here / str(os.getpid())).touch()
    _until(lambda: len(list(here.iterdir())) >= n, 30, f"{n} runs met in {here}")
    return os.getpid()


def says(text: str) -> str:
    """Writes ``text`` to stdout and to stderr."""
    print(text)
    print(text, file=sys.stderr)
    return text


def waits_for(path: str) -> int:
    """Waits (at most 60 s) until ``path`` exists; its pid."""
    _until(lambda: os.path.exists(path), 60, path, every_s=0.005)
    return os.getpid()


def touches(path: str) -> int:
    """Creates ``path``; its pid."""
    pathlib.Path(path).touch()
    return os.getpid()


def dies_when(path: str) -> None:
    """Waits for ``path``, then its process dies of SIGKILL."""
    waits_for(path)
    os.kill(os.getpid(), signal.SIGKILL)


def waits_in_a_process(path: str) -> int:
    """Waits in ``subprocess.run`` (a blocked waitpid) for a shell that waits until ``path``
    exists; its pid."""
    subprocess.run(["sh", "-c", f'while [ ! -e "{path}" ]; do sleep 0.01; done'], check=True)
    return os.getpid()


def sees_devices() -> tuple[str | None, int]:
    """The devices this run's environment names, and its worker's pid."""
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.getpid()


def loads_cuda(path: str) -> tuple[str | None, int]:
    """Loads the shared library at ``path`` (a stand-in for CUDA's driver library: no GPU
    here) as CUDA's initialisation would; what :func:`sees_devices` says."""
    import ctypes

    ctypes.CDLL(path)
    return sees_devices()


def _until(ready: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.01) -> None:
    """Return once ``ready()``; ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:g} s for {what}")
        time.sleep(every_s)
