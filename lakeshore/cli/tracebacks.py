"""A remote traceback as a user reads it: their own frames, Lakeshore's folded.

A function's traceback starts in the daemon (the runner that called it, the ``@udf``
wrapper): frames of Lakeshore's own modules say nothing about the user's bug. They are left
out of the table output, with a line saying how many; ``-o json`` keeps the whole text.
"""

from __future__ import annotations

import re
from pathlib import Path

import lakeshore

#: The package's own top-level modules and subpackages (``daemon``, ``sdk``, …).
_OWN = sorted(
    p.stem if p.suffix == ".py" else p.name
    for p in Path(lakeshore.__file__).parent.iterdir()
    if (p.suffix == ".py" or (p / "__init__.py").exists())
)
_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line \d+')
_OWN_PATH = re.compile(r"(?:^|/)lakeshore/(?:" + "|".join(map(re.escape, _OWN)) + r")(?:/|\.py$)")


def folded(text: str) -> str:
    """``text`` without the frames of Lakeshore's modules, and a line counting them."""
    out: list[str] = []
    dropped, skipping = 0, False
    for line in text.rstrip("\n").splitlines():
        frame = _FRAME.match(line)
        if frame:
            skipping = bool(_OWN_PATH.search(frame.group("path")))
            dropped += skipping
            if not skipping:
                out.append(line)
        elif skipping and line.startswith("    "):
            continue  # the folded frame's source line and its ^^^ markers
        else:
            skipping = False
            out.append(line)
    if dropped:
        plural = "s" * (dropped != 1)
        at = 1 if out and out[0].startswith("Traceback") else 0
        out.insert(at, f"  ({dropped} Lakeshore frame{plural} folded; -o json has them)")
    return "\n".join(out)


__all__ = ["folded"]
