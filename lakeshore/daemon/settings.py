"""The daemon's settings: one frozen Struct, built once by the composition root's caller.

``lakeshore daemon run`` builds it from its flags (see :mod:`lakeshore.cli.daemon_run`);
tests build it directly. Durations carry their unit in the name.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct

Seconds = Annotated[float, Meta(gt=0)]


class DaemonSettings(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How one worker daemon runs."""

    nats_url: str
    """The NATS server(s) the control plane uses."""
    name: str
    """The worker's name, unique in its namespace (default ``<hostname>-<pid>``)."""
    namespace: str = "default"
    """The namespace the daemon registers in."""
    id: str | None = None
    """The worker id a launcher gave this daemon; ``None``: the registry assigns one."""
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
    drain_timeout_s: Seconds = 30.0
    """On SIGTERM or retire, how long current runs may take before being interrupted."""
    request_timeout_s: Seconds = 5.0
    """Bound of every NATS request: claims, registry requests, acks (seconds)."""
