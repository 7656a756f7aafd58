"""The fault suite's figures: each row's test records what it tried and counted, and
``scripts/reliability.py`` turns the records into ``docs/reliability.md``.

A record is one JSON file per (row, case) under the results folder (``LAKESHORE_FAULT_RESULTS``
or ``.fault-results/`` at the repository root), rewritten by every run of that case.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def results_dir() -> Path:
    return Path(os.environ.get("LAKESHORE_FAULT_RESULTS") or ROOT / ".fault-results")


def record(
    row: int,
    case: str,
    *,
    tried: str,
    passed: bool,
    lost: int = 0,
    double_recorded: int = 0,
    stale: int = 0,
    errors_5xx: int = 0,
    note: str = "",
) -> None:
    """Write the figures of one case of a fault-matrix row (call it after the asserts, so
    a record says ``passed`` only when they held; a failing case records ``passed=False``
    from a ``finally`` if it wants its figures kept)."""
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "row": row, "case": case, "tried": tried, "passed": passed, "lost": lost,
        "double_recorded": double_recorded, "stale": stale, "errors_5xx": errors_5xx,
        "note": note, "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }  # fmt: skip
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in case)
    (folder / f"{row:02d}-{safe}.json").write_text(json.dumps(data, indent=1) + "\n")
