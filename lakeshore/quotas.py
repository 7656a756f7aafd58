"""The server's quotas (the ``[quotas]`` table of ``server.toml``) and the checks against them.

Several orgs share one control plane; each quota bounds what one org (or one namespace)
may take of it. Every check is a pure function of the quota and a count that its caller —
the owner of the state counted (see docs/architecture.md, "Who owns what") — passes in,
and runs before anything is changed: over a quota it raises
:class:`~lakeshore.errors.QuotaExceeded` (429) naming the quota and its value.

=========================  ==============================================================
quota                      checked by
=========================  ==============================================================
namespaces_per_org         Access, on namespace creation (``POST /v1/namespaces``, and a
                           provider route's write in an unknown namespace)
queues_per_namespace       QueueDirectory, on queue creation
daemons_per_org            WorkerRegistry, on registration and on a launch's rows
local_daemons_per_host     Launcher, on a launch on a ``local`` provider
pending_per_org            JobService's pending tally, on submit
elasticity_max             QueueDirectory (create) and QueueActor (patch)
result_waits_per_org       JobService's open waits (``services/waits.py``), on a result wait
result_waits_per_asker     the same, per token (HTTP) or NATS connection
=========================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Annotated

from msgspec import Meta, Struct

from lakeshore.errors import QuotaExceeded
from lakeshore.model import MAX_FLEET, Elasticity, Worker, WorkerStatus

Count = Annotated[int, Meta(ge=0)]

#: Worker states that count toward ``daemons_per_org``: being started, or running. A lost
#: worker does not (its process is most likely gone, and its replacement must fit), nor
#: does a stopped one.
COUNTED = frozenset(
    {WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.RETIRING}
)


class Quotas(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one org may take of the control plane; 0 forbids the thing altogether."""

    queues_per_namespace: Count = 10_000
    """Most queues a namespace may have besides its ``default`` one."""
    namespaces_per_org: Count = 1_000
    """Most namespaces an org may have (namespaces are never deleted)."""
    daemons_per_org: Count = 1_000
    """Most daemons an org may have starting or running at once, whoever started them
    (lost and stopped ones do not count)."""
    local_daemons_per_host: Count = 64
    """Most daemons the ``local`` providers (subprocesses of the control plane, so on its
    host) run at once for one org."""
    pending_per_org: Count = 1_000_000
    """Most invocations an org may have waiting in its queues (stored, not yet claimed)."""
    elasticity_max: Annotated[int, Meta(ge=0, le=MAX_FLEET)] = 100
    """Highest ``elasticity.max`` a queue may be created or patched with."""
    result_waits_per_org: Count = 1_000
    """Most result waits (``wait_s`` > 0, over HTTP and NATS) an org may hold open at once."""
    result_waits_per_asker: Count = 500
    """Most result waits one token over HTTP, or one NATS connection, may hold open at once."""


#: The defaults, for the actors and services built without the server's settings (tests).
DEFAULT_QUOTAS = Quotas()


def daemons_in(workers: Iterable[Worker], namespaces: Container[str]) -> int:
    """How many of ``workers`` count toward ``daemons_per_org`` for the org whose
    namespaces are ``namespaces``."""
    return sum(1 for w in workers if w.status in COUNTED and w.namespace in namespaces)


def check_queues(quotas: Quotas, namespace: str, have: int) -> None:
    """Room for one more queue in ``namespace``, which has ``have`` besides ``default``.

    Raises:
        QuotaExceeded: ``queues_per_namespace``.
    """
    if have + 1 > quotas.queues_per_namespace:
        raise QuotaExceeded(
            "queues_per_namespace",
            quotas.queues_per_namespace,
            f"namespace {namespace!r} has {have} queue(s) besides default",
            "delete one (`lakeshore queues rm NAME`), or ",
        )


def check_namespaces(quotas: Quotas, org: str, have: int) -> None:
    """Room for one more namespace in ``org``, which has ``have``.

    Raises:
        QuotaExceeded: ``namespaces_per_org``.
    """
    if have + 1 > quotas.namespaces_per_org:
        raise QuotaExceeded(
            "namespaces_per_org",
            quotas.namespaces_per_org,
            f"org {org!r} has {have} namespace(s)",
            "use one of them (`lakeshore namespaces ls`; namespaces cannot be deleted), or ",
        )


def daemon_room(quotas: Quotas, org: str, have: int, wanted: int, *, partial: bool = False) -> int:
    """How many of ``wanted`` new daemons the org may have, with ``have`` counted now.

    Args:
        partial: answer what fits when not all do (the controller's launches), instead of
            refusing; still refuses when none fits.

    Raises:
        QuotaExceeded: ``daemons_per_org``.
    """
    return _room(
        "daemons_per_org",
        quotas.daemons_per_org,
        have,
        wanted,
        partial,
        f"org {org!r} has {have} daemon(s) starting or running and this would add {wanted}",
        "stop some (`lakeshore daemon stop NAME`), or ",
    )


def local_room(quotas: Quotas, org: str, have: int, wanted: int, *, partial: bool = False) -> int:
    """How many of ``wanted`` daemons a ``local`` provider may start for the org, which
    runs ``have`` on this host now (``partial`` as in :func:`daemon_room`).

    Raises:
        QuotaExceeded: ``local_daemons_per_host``.
    """
    return _room(
        "local_daemons_per_host",
        quotas.local_daemons_per_host,
        have,
        wanted,
        partial,
        f"org {org!r} runs {have} daemon(s) on the control plane's host (local providers) "
        f"and this would start {wanted}",
        "stop some, or run daemons elsewhere (`lakeshore daemon run` on another machine), or ",
    )


def check_pending(quotas: Quotas, org: str, have: int, wanted: int) -> None:
    """Room for ``wanted`` more pending invocations in an org that has ``have``.

    Raises:
        QuotaExceeded: ``pending_per_org``; a batch is refused whole.
    """
    if have + wanted > quotas.pending_per_org:
        raise QuotaExceeded(
            "pending_per_org",
            quotas.pending_per_org,
            f"org {org!r} has {have} invocation(s) pending across its queues and this submit "
            f"adds {wanted}",
            "retry once its daemons have taken some, or ",
        )


def check_elasticity(quotas: Quotas, e: Elasticity) -> None:
    """An elasticity object's ``max`` must not be above the ceiling.

    Raises:
        QuotaExceeded: ``elasticity_max``.
    """
    if e.max > quotas.elasticity_max:
        raise QuotaExceeded(
            "elasticity_max",
            quotas.elasticity_max,
            f"elasticity max {e.max} is above it",
            f"use --max {quotas.elasticity_max} or less, or ",
        )


def _room(
    quota: str, limit: int, have: int, wanted: int, partial: bool, usage: str, hint: str
) -> int:
    free = max(0, limit - have)
    if wanted <= free:
        return wanted
    if partial and free > 0:
        return free
    raise QuotaExceeded(quota, limit, usage, hint)
