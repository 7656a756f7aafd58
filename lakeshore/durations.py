"""Durations written as people write them: ``30s``, ``5m``, ``1h``, ``2d`` (one parser, used
by the HTTP routes and the CLI alike)."""

from __future__ import annotations

import math
import re

from lakeshore.errors import Invalid

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
#: The longest duration accepted (ten years), in seconds.
MAX_S = 3650 * 86400.0


def parse_duration(text: str, what: str) -> float:
    """Seconds of a duration: a positive number and a unit, ``s``, ``m``, ``h`` or ``d``.

    Args:
        text: e.g. ``30s``, ``1.5h``.
        what: how to name the value in an error (``since``, ``--every``).

    Raises:
        Invalid: not of that form, zero, or longer than ten years.
    """
    match = _PATTERN.fullmatch(text.strip())
    seconds = float(match[1]) * _UNITS[match[2]] if match else math.nan
    if not 0 < seconds <= MAX_S:
        raise Invalid(
            f"{what} must be a duration like 30s, 5m, 1h or 2d (more than 0, at most "
            f"3650d), got {text!r}"
        )
    return seconds


__all__ = ["MAX_S", "parse_duration"]
