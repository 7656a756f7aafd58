"""Providers (where daemons are started) and the daemon launch request and answer."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from msgspec import UNSET, Meta, Struct, UnsetType

from lakeshore.model.names import MAX_ENTRIES, Labels, validate_name
from lakeshore.model.resources import DaemonResources
from lakeshore.model.workers import Worker

#: The provider every namespace has without creating it (not stored, cannot be deleted).
BUILTIN_PROVIDER = "local"
#: Most daemons one launch request may start (names ``<name>-00`` … ``<name>-99``).
MAX_LAUNCH = 100


class ProviderKind(StrEnum):
    #: the control plane starts daemons as subprocesses on its own host
    LOCAL = "local"
    #: daemons are started by hand with ``lakeshore daemon run`` and register themselves
    EXTERNAL = "external"
    #: daemons started over SSH on a list of hosts; they outlive the SSH session
    SSH = "ssh"
    #: one Slurm job per daemon (``sbatch``), stopped with ``scancel``
    SLURM = "slurm"


class Provider(Struct, frozen=True, kw_only=True):
    """A provider row (or the built-in ``local``, which is not stored)."""

    name: str
    namespace: str
    kind: ProviderKind
    #: free-form settings of the provider, kept as given
    config: dict[str, Any] = {}
    created_at: datetime
    #: free labels, e.g. ``lakeshore.io/project`` on the providers a compose file created
    labels: dict[str, str] = {}


class ProviderCreate(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    kind: ProviderKind
    #: at most 64 settings, JSON values nested at most 64 deep
    config: Annotated[dict[str, Any], Meta(max_length=MAX_ENTRIES)] = {}
    labels: Labels = {}


class ProviderPatch(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Replace a provider's config or labels; its kind is fixed at creation."""

    config: Annotated[dict[str, Any], Meta(max_length=MAX_ENTRIES)] | UnsetType = UNSET
    labels: Labels | UnsetType = UNSET
    #: present only to answer a clear 400: a provider's kind is immutable
    kind: Any = UNSET
    name: Any = UNSET


class DaemonLaunch(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Start ``count`` daemons on a provider: ``<name>`` alone, else ``<name>-00`` …"""

    #: where to start them: the built-in ``local`` or a provider of the namespace
    provider: str = BUILTIN_PROVIDER
    #: the queues every daemon pulls from; ``[]`` is the default queue
    queues: Annotated[list[str], Meta(max_length=MAX_ENTRIES)] = []
    count: Annotated[int, Meta(ge=1, le=MAX_LAUNCH)] = 1
    #: the daemon's name (one daemon) or its names' stem (``<name>-00`` …)
    name: str
    labels: Labels = {}
    #: what each daemon is told it has, over what it detects (``--gpus/--cpus/--memory``)
    resources: DaemonResources | None = None


class Launched(Struct, frozen=True, kw_only=True):
    """The rows of the daemons just launched (status ``starting``)."""

    workers: list[Worker]


def daemon_names(name: str, count: int) -> list[str]:
    """``[name]`` for one daemon, else ``name-00`` … (two digits: at most 100).

    Raises:
        InvalidName: ``name``, or a name made from it, is not a valid worker name.
    """
    validate_name("worker", name)
    names = [name] if count == 1 else [f"{name}-{i:02d}" for i in range(count)]
    for n in names:
        validate_name("worker", n)
    return names
