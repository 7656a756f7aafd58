"""The daemon's settings: one frozen Struct, built once by the composition root's caller.

``lakeshore daemon run`` builds it from its flags (see :mod:`lakeshore.cli.daemon_run`);
tests build it directly. Durations carry their unit in the name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from msgspec import Meta, Struct

from lakeshore.model import DaemonAccess

Seconds = Annotated[float, Meta(gt=0)]


class DaemonSettings(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How one worker daemon runs."""

    access: DaemonAccess
    """Its way onto NATS: URL(s), worker id and namespace, credential, CA (from ``POST
    …/daemons/join``, or from the control plane that started it)."""
    name: str
    """The worker's name, unique in its namespace (default ``<hostname>-<pid>``)."""
    queues: list[str] = []
    """Queues to pull from at registration; ``[]`` is the default queue."""
    labels: dict[str, str] = {}
    """Free-form labels the controller matches queues against."""
    concurrency: Annotated[int, Meta(ge=1, le=1024)] = 1
    """Invocations run at the same time (the claim batch is the number of free slots)."""
    provider: str = "external"
    """The provider that started the daemon (``external``: by hand)."""
    managed: bool = False
    """Launched and retired by the controller."""
    heartbeat_s: Seconds = 1.0
    """Period of heartbeats, which also carry membership changes (seconds)."""
    idle_poll_s: Seconds = 1.0
    """Longest wait for a nudge before scanning the member queues again (seconds)."""
    hold_s: Seconds = 2.0
    """How long a claim waits here for resources its runs hold before it is handed back for
    a daemon that has them free now (this one then claims nothing until they free here)."""
    drain_timeout_s: Seconds = 30.0
    """On SIGTERM or retire, how long current runs may take before being interrupted."""
    request_timeout_s: Seconds = 5.0
    """Bound of every NATS request: claims, registry requests, acks (seconds)."""
    orphan_after_s: Seconds | None = None
    """Retire (drain, then exit) once no heartbeat was answered for this long: the control
    plane that started the daemon (the ``local`` provider) is gone; ``None``: wait for the
    control plane for ever (a daemon started by hand)."""
    metrics_port: Annotated[int, Meta(ge=0, le=65535)] | None = None
    """Serve the daemon's ``GET /metrics`` (no token) on this port; ``None``: no listener,
    0: any free port."""
    metrics_host: str = "127.0.0.1"
    """Listen address of ``metrics_port``."""
    max_runs_per_process: Annotated[int, Meta(ge=1)] | None = None
    """Function runs after which a worker process is replaced by a fresh one (``None``: no
    limit; it is replaced anyway after it crashed or was stopped, or when the code changed)."""
    log_max_bytes: Annotated[int, Meta(ge=0)] = 16 * 1024 * 1024
    """Most bytes of one attempt's output published to its live log (the server's
    ``log_max_bytes`` has the same default); past it one line says how much was dropped."""
    code_cache: Path | None = None
    """Where this host's code snapshots are kept (``None``: ``~/.cache/lakeshore/code``);
    daemons of one host naming the same directory fetch each snapshot once."""
    code_cache_max_bytes: Annotated[int, Meta(ge=0)] = 10 * 1024**3
    """Bound of the code cache (the snapshots' files): least recently used out first."""

    gpus: str | None = None
    """``--gpus``: ``N`` (the first N found, or N declared on a host without ``nvidia-smi``),
    indices ``0,1``, or ``none``; ``None``: those detected (:mod:`lakeshore.daemon.inventory`)."""
    cpus: Annotated[float, Meta(gt=0, le=1024)] | None = None
    """``--cpus``: the CPUs runs may hold together; ``None``: detected (affinity, cgroup quota)."""
    memory: str | None = None
    """``--memory`` (``64G``): the memory runs may hold together; ``None``: detected (cgroup
    limit, else MemTotal)."""

    @property
    def namespace(self) -> str:
        """The namespace the daemon registers in (its credential's)."""
        return self.access.namespace

    @property
    def id(self) -> str:
        """The worker id (its credential's)."""
        return self.access.worker_id
