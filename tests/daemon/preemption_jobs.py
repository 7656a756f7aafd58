"""Functions for the preemption tests (``PYTHONPATH`` includes this folder): each run
records itself in ``<marker>.<n>`` (n = 1, 2, …) with what it saw, so a test can tell the
attempts apart and read the variables each one was given."""

from __future__ import annotations

import json
import os
import pathlib
import time


def _run(marker: str) -> int:
    """This run's number, its record written (with the run's variables)."""
    n = 1
    while pathlib.Path(f"{marker}.{n}").exists():
        n += 1
    seen = {k: os.environ.get(k) for k in ("LAKESHORE_ATTEMPT", "LAKESHORE_PREEMPTED")}
    pathlib.Path(f"{marker}.{n}").write_text(json.dumps(seen))
    return n


def stopped_then_fails_once(marker: str) -> dict[str, str | None]:
    """The first run hangs until stopped or killed; the second raises; the third returns
    the variables it saw."""
    n = _run(marker)
    if n == 1:
        time.sleep(3600)
    if n == 2:
        raise ValueError(
            f"second run fails (LAKESHORE_PREEMPTED={os.environ.get('LAKESHORE_PREEMPTED')})"
        )
    return json.loads(pathlib.Path(f"{marker}.{n}").read_text())
