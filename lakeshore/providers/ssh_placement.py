"""Where the ``ssh`` backend places new daemons: on the host with the most free slots.

A pure policy over what a launch found on each host (its live daemons of the provider, or
why it cannot be used), so it is tested without any host.
"""

from __future__ import annotations

from lakeshore.model import Worker
from lakeshore.providers.ssh_config import Target

#: ``(target, live daemons of the provider)`` or ``(target, why it cannot be used)``.
HostState = tuple[Target, int | str]


def place(
    workers: list[Worker], states: list[HostState], slots: int | None
) -> list[tuple[Worker, Target | None]]:
    """Each worker's host: the usable one with the most free slots (the fewest daemons),
    ties in ``states`` order; ``None`` where none has a free slot."""
    counts = {t.entry: n for t, n in states if isinstance(n, int)}
    order = [t for t, n in states if isinstance(n, int)]
    plan: list[tuple[Worker, Target | None]] = []
    for worker in workers:
        free = [t for t in order if slots is None or counts[t.entry] < slots]
        best = min(free, key=lambda t: counts[t.entry], default=None)
        if best is not None:
            counts[best.entry] += 1
        plan.append((worker, best))
    return plan


def unplaced_reason(states: list[HostState], slots: int | None) -> str:
    """Why a daemon got no host: every host full, or unusable (naming each and why)."""
    full = [t.entry for t, n in states if isinstance(n, int)]
    broken = [n for _, n in states if isinstance(n, str)]
    parts = []
    if full:
        parts.append(
            f"no free slot on hosts {', '.join(full)} ({slots} daemons each); "
            "raise slots or add hosts"
        )
    if broken:
        parts.append("; ".join(broken))
    return "; ".join(parts)
