"""The data dir is the server user's alone: the dir 0700, what is under it 0600 / 0700.

The store, its WAL, the NATS store, the daemons' logs and the client config hold arguments,
commands, their output, tokens and ``env`` secrets. ``lakeshore server`` sets the umask
``0o077`` so that everything it creates is private; a control plane started another way (a
test, an embedding program) gets the process's umask, so :func:`secure_data_dir` makes the
dir private at start and takes group and other bits off whatever an earlier run left.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

#: The data dir's own mode.
DIR_MODE = 0o700
#: The bits no entry under the data dir may have: any for group or others.
SHARED_BITS = 0o077
#: How many of the fixed paths a warning names.
_NAMED = 5


def secure_data_dir(path: Path) -> Path:
    """Create the data dir with mode 0700, or force an existing one to 0700, and take the
    group and other bits off every file and dir under it (a 0644 file becomes 0600, a 0755
    dir 0700), with one warning naming what was loose.

    Everything under ``path`` is treated as the server's: give it a dir of its own.
    Symbolic links are neither followed nor changed.

    Args:
        path: the data dir.

    Returns:
        ``path``.

    Raises:
        OSError: it cannot be created, or a mode cannot be changed (e.g. another user's).
    """
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode != DIR_MODE:
        log.warning("data dir %s had mode %03o; now %03o", path, mode, DIR_MODE)
        path.chmod(DIR_MODE)
    fixed: list[str] = []
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            entry = Path(root, name)
            if _private(entry):
                fixed.append(str(entry))
    if fixed:
        shown = ", ".join(fixed[:_NAMED]) + (", …" if len(fixed) > _NAMED else "")
        log.warning(
            "data dir %s: %d path(s) were open to group or others; now the owner's only: %s",
            path, len(fixed), shown,
        )  # fmt: skip
    return path


def _private(entry: Path) -> bool:
    """Take the group and other bits off ``entry``; whether it had any."""
    try:
        st = entry.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode) or not mode & SHARED_BITS:
            return False
        entry.chmod(mode & ~SHARED_BITS)
    except FileNotFoundError:
        return False  # removed meanwhile (a NATS store compacting, a WAL checkpointed)
    return True


__all__ = ["DIR_MODE", "SHARED_BITS", "secure_data_dir"]
