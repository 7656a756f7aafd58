"""Functions the dashboard tests' daemons run (``fn="dashboard_jobs:<name>"``); a test puts
this folder on the daemons' ``PYTHONPATH``."""

from __future__ import annotations


def refuse(width: int) -> None:
    """Fails in a frame of the user's, with a message of one word ``width`` characters long
    (a line the page must wrap)."""
    raise ValueError("refused:" + "x" * width)
