"""What an invocation asks of its daemon's machine (spec/resources.md): GPUs (of a type),
CPUs and memory.

A request is checked at the edge — the submit route, the SDK before it sends, the CLI — by
:func:`check_resources`, which names the field, its range and what was given; nothing is
submitted when one is wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, NamedTuple

from msgspec import Meta, Struct

from lakeshore.errors import Invalid

#: Most GPUs one invocation may ask for (a large node has 8–16; 64 leaves room).
MAX_GPUS = 64
#: Most CPUs one invocation may ask for.
MAX_CPUS = 1024.0
#: Most memory one invocation may ask for (64 TiB).
MAX_MEMORY_BYTES = 64 * 1024**4
#: A GPU type: letters, digits and ``. _ -`` (``H100``, ``A100-SXM4-80GB``).
GPU_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Memory: a number and a binary unit (``16G``, ``512Mi``, ``1.5TiB``).
MEMORY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT])(?:i?B?)\s*$", re.IGNORECASE)
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class Resources(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """An invocation's request: what its run holds while it runs."""

    #: GPUs, each its run's alone
    gpus: int = 0
    #: the GPUs' type (``H100``): matched against the detected name; ``None``: any
    gpu_type: Annotated[str, Meta(max_length=64)] | None = None
    #: CPUs (fractions allowed)
    cpus: float = 1.0
    #: memory with a binary unit (``16G``); ``None``: not tracked
    memory: Annotated[str, Meta(max_length=32)] | None = None


def memory_bytes(value: str) -> int:
    """``16G`` → 17179869184 (K, M, G, T: powers of 1024; ``Gi``, ``GB``, ``GiB`` alike).

    Raises:
        Invalid: no number, or no unit.
    """
    m = MEMORY.match(value)
    if m is None:
        raise Invalid(
            f"resources.memory {value!r} must be a number and a unit: K, M, G or T "
            "(powers of 1024), e.g. 16G or 512M"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def parse_gpus(value: str) -> int | list[int]:
    """``--gpus``: ``4`` → 4 (a count), ``0,2`` → ``[0, 2]`` (indices), ``none`` → ``[]``.

    Raises:
        Invalid: anything else.
    """
    text = value.strip().lower()
    if text in ("none", ""):
        return []
    try:
        if "," not in text:
            n = int(text)
            if not 0 <= n <= MAX_GPUS:
                raise ValueError
            return n if n else []
        indices = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise Invalid(
            f"--gpus {value!r}: give a count (4), device indices (0,1) or none; "
            f"a count is 0 to {MAX_GPUS}"
        ) from None
    if len(set(indices)) != len(indices) or any(i < 0 for i in indices):
        raise Invalid(f"--gpus {value!r}: indices must be distinct and 0 or more")
    return sorted(indices)


def check_resources(what: str, r: Resources) -> None:
    """Refuse a request out of range, naming ``what``, the field, the range and the value.

    Raises:
        Invalid: the first field that is wrong.
    """
    if not 0 <= r.gpus <= MAX_GPUS:
        raise Invalid(f"{what}: resources.gpus must be between 0 and {MAX_GPUS} (got {r.gpus})")
    if not (math.isfinite(r.cpus) and 0 < r.cpus <= MAX_CPUS):
        raise Invalid(
            f"{what}: resources.cpus must be more than 0 and at most {MAX_CPUS:g} (got {r.cpus:g})"
        )
    if r.gpu_type is not None:
        if not GPU_TYPE.match(r.gpu_type):
            raise Invalid(
                f"{what}: resources.gpu_type {r.gpu_type!r} must be letters, digits and . _ - "
                "(e.g. H100 or A100-SXM4-80GB)"
            )
        if r.gpus == 0:
            raise Invalid(
                f"{what}: resources.gpu_type {r.gpu_type!r} names the type of the GPUs asked "
                "for: set resources.gpus to 1 or more"
            )
    if r.memory is not None:
        try:
            size = memory_bytes(r.memory)
        except Invalid as e:
            raise Invalid(f"{what}: {e.message}") from None
        if not 0 < size <= MAX_MEMORY_BYTES:
            raise Invalid(
                f"{what}: resources.memory must be more than 0 and at most 64T (got {r.memory})"
            )


class DaemonResources(
    Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """What a daemon is told it has, over what it detects (``daemon run/launch --gpus --cpus
    --memory``); ``None`` fields are detected."""

    #: ``N`` (the first N found; N declared on a host without ``nvidia-smi``), indices
    #: ``0,1``, or ``none``
    gpus: Annotated[str, Meta(max_length=200)] | None = None
    cpus: float | None = None
    #: ``64G``
    memory: Annotated[str, Meta(max_length=32)] | None = None

    def flags(self) -> list[str]:
        """Its ``lakeshore daemon run`` flags."""
        out = []
        if self.gpus is not None:
            out += ["--gpus", self.gpus]
        if self.cpus is not None:
            out += ["--cpus", f"{self.cpus:g}"]
        if self.memory is not None:
            out += ["--memory", self.memory]
        return out


def check_daemon_resources(r: DaemonResources) -> None:
    """Refuse what a daemon could not be told it has, naming the flag.

    Raises:
        Invalid: the first field that is wrong.
    """
    if r.gpus is not None:
        parse_gpus(r.gpus)
    if r.cpus is not None and not (math.isfinite(r.cpus) and 0 < r.cpus <= MAX_CPUS):
        raise Invalid(f"--cpus must be more than 0 and at most {MAX_CPUS:g} (got {r.cpus:g})")
    if r.memory is not None:
        try:
            size = memory_bytes(r.memory)
        except Invalid as e:
            raise Invalid("--memory " + e.message.removeprefix("resources.memory ")) from None
        if not 0 < size <= MAX_MEMORY_BYTES:
            raise Invalid(f"--memory must be more than 0 and at most 64T (got {r.memory})")


class Gpu(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One GPU of a daemon's host, as ``nvidia-smi`` names it (or as ``--gpus`` declared it)."""

    #: its index in PCI bus order (what ``CUDA_VISIBLE_DEVICES`` names with
    #: ``CUDA_DEVICE_ORDER=PCI_BUS_ID``)
    index: int
    #: ``GPU-…``; empty for a GPU declared by ``--gpus`` on a host without ``nvidia-smi``
    uuid: str = ""
    #: e.g. ``NVIDIA H100 80GB HBM3``; empty for a declared GPU
    name: str = ""
    #: its memory (MiB), as ``nvidia-smi`` reports ``memory.total``
    memory_mib: int | None = None


class Capacity(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a daemon has (its total), or has free now."""

    gpus: list[Gpu] = []
    cpus: float = 1.0
    #: bytes; ``None``: not known (requests' memory is then not checked)
    memory: int | None = None


class WorkerResources(Struct, frozen=True, kw_only=True):
    """A worker row's resources: what its daemon has, and what is free now."""

    total: Capacity
    free: Capacity


def gpu_type_matches(wanted: str, gpu: Gpu, labels: Mapping[str, str]) -> bool:
    """Whether a request's ``gpu_type`` names ``gpu`` (docs/resources.md has the rule).

    The daemon's ``gpu_type`` label, when set, is the type of all its GPUs (compared without
    case). Otherwise the type must be whole words of the GPU's name, in order, words being
    split at spaces, dashes and underscores and compared without case: ``H100`` and
    ``h100 80gb`` match ``NVIDIA H100 80GB HBM3``; ``A100`` and ``A100-SXM4-80GB`` match
    ``NVIDIA A100-SXM4-80GB``; ``H10`` matches neither.
    """
    label = labels.get("gpu_type")
    if label is not None:
        return label.casefold() == wanted.casefold()
    name, want = _words(gpu.name), _words(wanted)
    if not want:
        return False
    return any(name[i : i + len(want)] == want for i in range(len(name) - len(want) + 1))


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s_-]+", text.casefold()) if w]


def usable_gpus(r: Resources, gpus: list[Gpu], labels: Mapping[str, str]) -> list[Gpu]:
    """The GPUs of ``gpus`` of the type ``r`` asks for (all of them when it names none)."""
    if r.gpu_type is None:
        return list(gpus)
    return [g for g in gpus if gpu_type_matches(r.gpu_type, g, labels)]


def fits(r: Resources, have: Capacity, labels: Mapping[str, str]) -> bool:
    """Whether ``have`` (a total, or what is free) holds the request ``r``."""
    if r.gpus and r.gpus > len(usable_gpus(r, have.gpus, labels)):
        return False
    return scalars_fit(r, have.cpus, have.memory)


def scalars_fit(r: Resources, cpus: float, memory: int | None) -> bool:
    """Whether ``cpus`` and ``memory`` (bytes; ``None``: not counted) hold what ``r`` asks
    of them (its GPUs aside)."""
    if r.cpus > cpus + 1e-9:
        return False
    return r.memory is None or memory is None or memory_bytes(r.memory) <= memory


def describe_request(r: Resources) -> str:
    """``2 GPUs H100, 8 CPUs, 64G memory`` (what ``jobs show`` and the reasons print)."""
    parts = []
    if r.gpus:
        gpus = f"{r.gpus} GPU{'s' if r.gpus != 1 else ''}"
        parts.append(f"{gpus} {r.gpu_type}" if r.gpu_type else gpus)
    parts.append(f"{r.cpus:g} CPU{'s' if r.cpus != 1 else ''}")
    if r.memory is not None:
        parts.append(f"{r.memory} memory")
    return ", ".join(parts)


def describe_capacity(c: Capacity) -> str:
    """``4 GPUs NVIDIA H100 80GB HBM3, 32 CPUs, 251G memory``."""
    parts = []
    if c.gpus:
        names = sorted({g.name for g in c.gpus if g.name})
        gpus = f"{len(c.gpus)} GPU{'s' if len(c.gpus) != 1 else ''}"
        parts.append(f"{gpus} {'/'.join(names)}" if names else gpus)
    else:
        parts.append("no GPU")
    parts.append(f"{c.cpus:g} CPU{'s' if c.cpus != 1 else ''}")
    if c.memory is not None:
        parts.append(f"{human_bytes(c.memory)} memory")
    return ", ".join(parts)


def human_bytes(n: int) -> str:
    """``17179869184`` → ``16G`` (the unit of requests; one decimal below 10)."""
    for unit, size in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.1f}{unit}".replace(".0", "") if value < 10 else f"{value:.0f}{unit}"
    return f"{n}B"


class DaemonGpus(NamedTuple):
    """The GPUs each daemon of a provider brings."""

    count: int = 0
    #: their type (``None``: not said, so a request naming a type is not counted as fitting)
    gpu_type: str | None = None

    def fits(self, r: Resources) -> bool:
        """Whether one such daemon could ever hold ``r``'s GPUs."""
        if r.gpus > self.count:
            return False
        if r.gpu_type is None:
            return True
        # The type rule of a daemon's own GPUs (docs/resources.md), on the provider's name.
        return self.gpu_type is not None and gpu_type_matches(
            r.gpu_type, Gpu(index=0, name=self.gpu_type), {}
        )
