"""What one daemon of a provider has, as the controller counts it (spec/resources.md).

The controller scales an elastic queue whose pending work asks for GPUs by the GPUs each
daemon of its provider brings, and launches none for work no such daemon could hold. What
one daemon brings is read from the provider's config:

- ``slurm``: its ``gres`` — ``gpu:4`` is 4 GPUs, ``gpu:h100:4`` 4 of type ``h100``, ``gpu``
  one (Slurm gives the job those devices in ``CUDA_VISIBLE_DEVICES``);
- ``local`` and ``ssh``: ``gpus: N`` and ``gpu_type``;
- anything else, or none of these: no GPU.

Each daemon such a provider launches is started with ``--gpus N`` (the first N it finds, or N
declared on a host without ``nvidia-smi``) and, with a type, the label ``gpu_type``.
"""

from __future__ import annotations

import re
from typing import Any

from lakeshore.errors import Invalid, LakeshoreError
from lakeshore.model import DaemonResources, ProviderKind
from lakeshore.model.providers import Provider
from lakeshore.model.resources import GPU_TYPE, MAX_GPUS, DaemonGpus
from lakeshore.providers.base import find_provider

#: ``gpu``, ``gpu:4``, ``gpu:h100:4`` (the first of a comma list that names GPUs).
_GRES = re.compile(r"^gpu(?::(?P<type>[A-Za-z0-9._-]+?))??(?::(?P<n>\d+))?$")


def daemon_gpus(provider: Provider) -> DaemonGpus:
    """What one daemon of ``provider`` brings (a config it cannot read: no GPU)."""
    config = provider.config
    if provider.kind is ProviderKind.SLURM:
        return gres_gpus(config.get("gres"))
    if provider.kind in (ProviderKind.LOCAL, ProviderKind.SSH):
        n = config.get("gpus")
        kind = config.get("gpu_type")
        if _gpu_count(n):
            return DaemonGpus(n, kind if isinstance(kind, str) else None)
    return DaemonGpus()


def _gpu_count(n: Any) -> bool:
    """Whether a config's ``gpus`` is a count of GPUs (1 to :data:`MAX_GPUS`)."""
    return isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_GPUS


def gres_gpus(gres: Any) -> DaemonGpus:
    """The GPUs of a Slurm ``--gres`` value (``gpu:h100:4`` → 4 of type ``h100``)."""
    if not isinstance(gres, str):
        return DaemonGpus()
    for part in gres.split(","):
        m = _GRES.match(part.strip())
        if m is not None:
            return DaemonGpus(int(m.group("n") or 1), m.group("type"))
    return DaemonGpus()


def launched_with(provider: Provider) -> DaemonResources | None:
    """``daemon run --gpus N`` for the daemons of a provider whose each brings N GPUs: the
    first N the daemon finds (a Slurm job's are those of its ``CUDA_VISIBLE_DEVICES``), or
    N declared on a host without ``nvidia-smi``."""
    gpus = daemon_gpus(provider)
    return DaemonResources(gpus=str(gpus.count)) if gpus.count else None


def check_gpu_config(config: dict[str, Any]) -> None:
    """A local or ssh provider's ``gpus`` and ``gpu_type``, checked when it is written.

    Raises:
        Invalid: naming the key, its form and what was given.
    """
    n = config.get("gpus")
    if n is not None and not _gpu_count(n):
        raise Invalid(f"provider config: gpus must be a whole number 1 to {MAX_GPUS} (got {n!r})")
    kind = config.get("gpu_type")
    if kind is not None and (not isinstance(kind, str) or not GPU_TYPE.match(kind)):
        raise Invalid(f"provider config: gpu_type must be letters, digits and . _ - (got {kind!r})")


class Demand:
    """What the controller reads each tick of GPU work: what a queue's pending invocations
    ask (the history's rows) and what each daemon of a provider brings (its row).

    Args:
        store: the row store (the history's job queries, namespaces and providers).
    """

    def __init__(self, store: Any) -> None:
        self._store = store

    async def asks(self, namespace: str, queue: str) -> tuple[tuple[int, str | None, int], ...]:
        """``(gpus, gpu_type, how many)`` of the queue's pending GPU requests."""
        return tuple(await self._store.gpu_demand(namespace, queue))

    async def per_daemon(self, namespace: str, provider: str) -> DaemonGpus:
        """What one daemon of ``provider`` brings (none when the provider is gone)."""
        ns = await self._store.get_namespace(namespace)
        if ns is None:
            return DaemonGpus()
        try:
            return daemon_gpus(await find_provider(self._store, ns, provider))
        except LakeshoreError:
            return DaemonGpus()
