"""Functions the Slurm tests' daemons run (imported by the daemons via PYTHONPATH)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def where() -> str | None:
    """The id of the Slurm job it runs in."""
    return os.environ.get("SLURM_JOB_ID")


def hold(gate: str, timeout_s: float = 60.0) -> str:
    """Run until the file ``gate`` exists (the test creates it), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "released"


def devices(gate: str) -> dict[str, str | None]:
    """Its GPUs as its daemon gave them, once the file ``gate`` exists."""
    hold(gate)
    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "gpus": os.environ.get("LAKESHORE_GPUS"),
        "job": os.environ.get("SLURM_JOB_ID"),
    }
