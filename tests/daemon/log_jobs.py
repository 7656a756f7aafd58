"""Functions the live-log tests run on a daemon (importable by name: ``log_jobs:<name>``)."""

from __future__ import annotations

import logging
import sys


def chatter(name: str) -> str:
    """Print, write to stderr and log (logging's default handler writes to stderr)."""
    print(f"hello {name}", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    logging.getLogger("chatter").warning("logged for %s", name)
    return name
