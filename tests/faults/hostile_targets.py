"""Functions for rows 11 and 21's daemons (``PYTHONPATH`` includes this folder). Each logs
one line per execution to ``$FAULTS_RUNS`` (``i pid``), as ``fault_targets.work`` does."""

import os
import signal

from fault_targets import daemon_pid


def _log(i: int) -> None:
    with open(os.environ["FAULTS_RUNS"], "a") as f:
        f.write(f"{i} {daemon_pid()}\n")


def big(i: int, mib: int) -> str:
    """Return ``mib`` MiB of text: more than NATS carries in one message."""
    _log(i)
    return "x" * (mib * 1024 * 1024)


def poison(i: int) -> None:
    """Kill the daemon that runs it (SIGKILL), every time."""
    _log(i)
    os.kill(daemon_pid(), signal.SIGKILL)
