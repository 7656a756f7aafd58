"""The daemon's resource ledger: what it has, what its runs hold, and each run's devices.

The dispatcher (the one owner of running jobs) takes a :class:`Grant` from the ledger for
each run it starts and gives it back when the run ends, so a GPU is never in two running
runs of one daemon. GPUs are granted lowest index first among those of the asked type.

A grant becomes the run's environment (:meth:`Grant.env`): ``CUDA_VISIBLE_DEVICES`` lists
its GPUs' indices — ``""`` for a run that asked for none, so it sees no device at all —
with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (the indices are ``nvidia-smi``'s, which are in PCI
bus order; CUDA's default order is fastest first) and ``LAKESHORE_GPUS``, their uuids
(their indices for GPUs declared by ``--gpus`` on a host without ``nvidia-smi``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lakeshore.model import Capacity, Gpu, Resources, fits, memory_bytes
from lakeshore.model.resources import scalars_fit, usable_gpus

#: The variables a grant sets (over the invocation's own ``env``).
VISIBLE_VAR, ORDER_VAR, GPUS_VAR = "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LAKESHORE_GPUS"
#: What an invocation asks for when it names nothing (spec/resources.md).
DEFAULT_REQUEST = Resources()


@dataclass(frozen=True, slots=True)
class Grant:
    """What one run holds."""

    gpus: tuple[Gpu, ...] = ()
    cpus: float = 0.0
    #: bytes (0: its request named no memory)
    memory: int = 0
    env: Mapping[str, str] = field(default_factory=dict)


def _env(gpus: tuple[Gpu, ...]) -> dict[str, str]:
    return {
        VISIBLE_VAR: ",".join(str(g.index) for g in gpus),
        ORDER_VAR: "PCI_BUS_ID",
        GPUS_VAR: ",".join(g.uuid or str(g.index) for g in gpus),
    }


#: A grant of no GPU's variables (``CUDA_VISIBLE_DEVICES=""``: the run sees none).
_NO_GPUS: Mapping[str, str] = MappingProxyType(_env(()))


class Ledger:
    """Free resources of one daemon. Not thread-safe: the dispatcher's loop owns it.

    Args:
        total: what the daemon has.
        labels: its labels (``gpu_type`` names the type of all its GPUs).
    """

    def __init__(self, total: Capacity, labels: Mapping[str, str]) -> None:
        self.total = total
        self._labels = dict(labels)
        self._free_gpus = {g.index: g for g in total.gpus}
        self._cpus = total.cpus
        self._memory = total.memory

    def feasible(self, r: Resources) -> bool:
        """Whether the request could ever run here (it fits what the daemon has)."""
        return fits(r, self.total, self._labels)

    def free(self) -> Capacity:
        """What no run holds now."""
        gpus = sorted(self._free_gpus.values(), key=lambda g: g.index)
        return Capacity(gpus=gpus, cpus=round(self._cpus, 6), memory=self._memory)

    def fits_now(self, r: Resources) -> bool:
        """Whether ``r`` fits what is free now."""
        return fits(r, self.free(), self._labels)

    def take(self, r: Resources) -> Grant | None:
        """Hold what ``r`` asks for, or ``None`` (nothing taken) when it does not fit now."""
        if r.gpus:
            free = self.free()
            if not fits(r, free, self._labels):
                return None
            gpus = tuple(usable_gpus(r, free.gpus, self._labels)[: r.gpus])
        elif scalars_fit(r, self._cpus, self._memory):  # no GPU to pick: nothing to list
            gpus = ()
        else:
            return None
        for g in gpus:
            del self._free_gpus[g.index]
        memory = 0 if r.memory is None or self._memory is None else memory_bytes(r.memory)
        self._cpus -= r.cpus
        if self._memory is not None:
            self._memory -= memory
        return Grant(gpus=gpus, cpus=r.cpus, memory=memory, env=_env(gpus) if gpus else _NO_GPUS)

    def give(self, grant: Grant) -> None:
        """A run ended: what it held is free again."""
        for g in grant.gpus:
            self._free_gpus[g.index] = g
        self._cpus = min(self._cpus + grant.cpus, self.total.cpus)
        if self._memory is not None:
            self._memory += grant.memory
