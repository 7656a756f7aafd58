"""Logging of the daemon process: one line per record on stderr, configured once."""

from __future__ import annotations

import logging.config

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(level: str = "INFO") -> None:
    """Configure the root logger for ``lakeshore daemon run``.

    Args:
        level: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR``. nats-py's own logger stays at
            WARNING or above: its INFO lines repeat what the daemon reports.
    """
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"line": {"format": FORMAT}},
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": "line",
                    "stream": "ext://sys.stderr",
                }
            },
            "root": {"level": level, "handlers": ["stderr"]},
            "loggers": {"nats": {"level": max(logging.getLevelName(level), logging.WARNING)}},
        }
    )
