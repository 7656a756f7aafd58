"""What an invocation asks of its daemon's machine (spec/resources.md): GPUs (of a type),
CPUs and memory.

A request is checked at the edge — the submit route, the SDK before it sends, the CLI — by
:func:`check_resources`, which names the field, its range and what was given; nothing is
submitted when one is wrong.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

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
