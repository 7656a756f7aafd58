"""Functions the controller tests' daemons run (imported by the daemons via PYTHONPATH)."""

from __future__ import annotations

import time
from pathlib import Path


def noop() -> None:
    """Return at once."""


def hold(gate: str, timeout_s: float = 60.0) -> str:
    """Run until the file ``gate`` exists (the test creates it), at most ``timeout_s``.

    It keeps a daemon busy and its invocation running for as long as a test needs a
    steady backlog.
    """
    deadline = time.monotonic() + timeout_s
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "released"
