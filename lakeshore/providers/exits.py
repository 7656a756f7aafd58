"""How a daemon's end is told: its exit status in words, and the last lines of its log
(every backend quotes them in the reason of an unexpected exit)."""

from __future__ import annotations

import signal
from pathlib import Path

#: How much of the end of a daemon's log is read, and how many of its lines are quoted.
_TAIL_BYTES = 2048
_TAIL_LINES = 3
#: The lines a backend writes into a daemon's log itself (``--- <time> launched: …``).
HEADER_PREFIX = "--- "


def describe(code: int) -> str:
    """``exited with code N``, or ``killed by SIGKILL`` for a negative (signal) status."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def tail(path: Path) -> str:
    """The last few non-empty lines of a daemon's log, joined with `` | `` (the backend's
    own header lines left out; empty if this host cannot read it)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - _TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join([ln for ln in lines if not ln.startswith(HEADER_PREFIX)][-_TAIL_LINES:])
