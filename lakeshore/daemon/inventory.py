"""What a daemon's host gives it to run with: GPUs, CPUs and memory (spec/resources.md).

Detected once, at the daemon's start:

- **GPUs**: ``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,
  nounits`` when ``nvidia-smi`` is on the daemon's ``PATH`` (none when it is not, or when it
  fails — a host whose driver is gone runs CPU work, and says why in its log). When the
  daemon's own ``CUDA_VISIBLE_DEVICES`` is set, only the devices it names (by index or by
  uuid) are the daemon's: it was given those (by Slurm, or a person).
- **CPUs**: those the process may run on (its affinity), bounded by its cgroup's CPU quota
  (``cpu.max``, cgroup v2; ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, v1).
- **memory**: its cgroup's limit (``memory.max``, v2; ``memory.limit_in_bytes``, v1), else
  the host's ``MemTotal``.

``--gpus N|0,1|none``, ``--cpus`` and ``--memory`` override what is detected: ``N`` keeps
the first N devices found (or declares N devices, ``0`` to ``N-1``, on a host without
``nvidia-smi``), ``0,1`` keeps those indices (or declares them), ``none`` keeps none.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from lakeshore.errors import Invalid
from lakeshore.model import Capacity, Gpu, memory_bytes
from lakeshore.model.resources import MAX_CPUS, parse_gpus

log = logging.getLogger(__name__)

#: The query a daemon runs; its output's columns are these, in this order.
NVIDIA_SMI_QUERY = (
    "--query-gpu=index,uuid,name,memory.total",
    "--format=csv,noheader,nounits",
)
#: Longest wait for ``nvidia-smi`` (seconds): a hung driver must not hold the daemon.
NVIDIA_SMI_TIMEOUT_S = 15.0
#: A cgroup v1 memory limit at or above this is "no limit" (the kernel's page-rounded max).
_V1_UNLIMITED = 1 << 60


def detect(
    environ: Mapping[str, str],
    *,
    gpus: str | None = None,
    cpus: float | None = None,
    memory: str | None = None,
    at_least_cpus: int = 1,
    cgroup: Path | None = None,
) -> Capacity:
    """The daemon's capacity: detected, then overridden by what was given.

    Args:
        environ: the daemon's environment (its ``PATH`` finds ``nvidia-smi``; its
            ``CUDA_VISIBLE_DEVICES`` limits the devices).
        gpus: ``--gpus``: ``N``, a list of indices ``0,1``, or ``none``.
        cpus: ``--cpus``.
        memory: ``--memory`` (``64G``).
        at_least_cpus: the daemon's ``--concurrency``: CPUs detected (not given) are at least
            this many, so the slots a person asked for stay usable by runs that name no CPUs
            (``cpus 1`` each) — I/O-bound work often runs more at once than there are cores.
        cgroup: the daemon's cgroup directory (default: its own, from ``/proc/self/cgroup``).

    Raises:
        Invalid: an override that is malformed, or names devices the host does not have.
    """
    cgroup = own_cgroup() if cgroup is None else cgroup
    spec = parse_gpus(gpus) if gpus is not None else None
    found = [] if spec == [] else detect_gpus(environ)
    return Capacity(
        gpus=choose_gpus(found, spec),
        cpus=cpus if cpus is not None else max(detect_cpus(cgroup), float(at_least_cpus)),
        memory=memory_bytes(memory) if memory is not None else detect_memory(cgroup),
    )


def choose_gpus(found: list[Gpu], spec: int | list[int] | None) -> list[Gpu]:
    """The daemon's GPUs: ``found`` limited by ``--gpus`` (``None``: all found).

    Raises:
        Invalid: ``--gpus`` names more devices, or other indices, than were found.
    """
    if spec is None:
        return found
    if isinstance(spec, int):
        if not found:
            return [Gpu(index=i) for i in range(spec)]
        if spec > len(found):
            raise Invalid(
                f"--gpus {spec}: this host has {len(found)} GPU(s) "
                f"({', '.join(str(g.index) for g in found)})"
            )
        return found[:spec]
    if not found:
        return [Gpu(index=i) for i in spec]
    by_index = {g.index: g for g in found}
    missing = [i for i in spec if i not in by_index]
    if missing:
        raise Invalid(
            f"--gpus: no GPU {', '.join(map(str, missing))} here; this host has "
            f"{', '.join(str(g.index) for g in found)}"
        )
    return [by_index[i] for i in spec]


def detect_gpus(environ: Mapping[str, str]) -> list[Gpu]:
    """The GPUs ``nvidia-smi`` lists, limited to the daemon's ``CUDA_VISIBLE_DEVICES``."""
    smi = shutil.which("nvidia-smi", path=environ.get("PATH", os.defpath))
    if smi is None:
        return []
    try:
        done = subprocess.run(
            [smi, *NVIDIA_SMI_QUERY],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            env=dict(environ),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("nvidia-smi did not answer (%s): no GPU used", e)
        return []
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        log.warning(
            "nvidia-smi failed (exit %d%s): no GPU used",
            done.returncode,
            f": {why[0]}" if why else "",
        )
        return []
    gpus = parse_nvidia_smi(done.stdout)
    return visible(gpus, environ.get("CUDA_VISIBLE_DEVICES"))


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """The rows of the :data:`NVIDIA_SMI_QUERY` output, in index order (bad rows skipped)."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4:
            if line.strip():
                log.warning("nvidia-smi: skipping a row not index, uuid, name, memory: %r", line)
            continue
        index, uuid, name, mem = cells
        try:
            gpus.append(Gpu(index=int(index), uuid=uuid, name=name, memory_mib=_mib(mem)))
        except ValueError:
            log.warning("nvidia-smi: skipping a row with index %r", index)
    return sorted(gpus, key=lambda g: g.index)


def _mib(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]" on parts with unified memory
        return None


def visible(gpus: list[Gpu], cuda_visible: str | None) -> list[Gpu]:
    """The devices of ``gpus`` that ``CUDA_VISIBLE_DEVICES`` names (unset: all of them).

    Entries are indices or uuids (or a uuid's unique prefix, as CUDA accepts); as in CUDA,
    the list ends at the first entry that names no device, and an empty value hides all.
    """
    if cuda_visible is None:
        return gpus
    out: list[Gpu] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        match = [g for g in gpus if entry and (str(g.index) == entry or g.uuid.startswith(entry))]
        if len(match) != 1 or match[0] in out:
            break
        out.append(match[0])
    return out


def own_cgroup(root: Path = Path("/sys/fs/cgroup")) -> Path:
    """This process's cgroup directory (v2: ``0::/path``), else the mount's root (v1, or a
    container whose cgroup namespace makes its own the root)."""
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        if line.startswith("0::"):
            mine = root / line[3:].lstrip("/")
            if mine.is_dir():
                return mine
    return root


def detect_cpus(cgroup: Path) -> float:
    """CPUs the daemon may use: its affinity, bounded by its cgroup's quota."""
    try:
        n = float(len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        n = float(os.cpu_count() or 1)
    quota = _cpu_quota(cgroup)
    if quota is not None:
        n = min(n, quota)
    return min(max(n, 0.01), MAX_CPUS)


def _cpu_quota(cgroup: Path) -> float | None:
    v2 = _read(cgroup / "cpu.max")
    if v2 is not None:
        parts = v2.split()
        if len(parts) == 2 and parts[0] != "max":
            return _ratio(parts[0], parts[1])
        return None
    quota = _read(cgroup / "cpu" / "cpu.cfs_quota_us")
    period = _read(cgroup / "cpu" / "cpu.cfs_period_us")
    if quota is None or period is None or quota.startswith("-"):
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = float(quota), float(period)
    except ValueError:
        return None
    return math.floor(q / p * 100) / 100 if q > 0 and p > 0 else None


def detect_memory(cgroup: Path) -> int | None:
    """Bytes the daemon may use: its cgroup's limit, else the host's ``MemTotal``."""
    for limit in (cgroup / "memory.max", cgroup / "memory" / "memory.limit_in_bytes"):
        text = _read(limit)
        if text is not None and text.isdigit() and int(text) < _V1_UNLIMITED:
            return int(text)
    meminfo = _read(Path("/proc/meminfo"))
    for line in (meminfo or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
