"""What a namespace and its org use of each quota now, for ``GET /v1/namespaces/:ns``.

Each count is asked of its owner: the queue rows of the store, the WorkerRegistry's rows,
the Launcher's local processes, and JetStream's pending counts.
"""

from __future__ import annotations

from typing import Any

from lakeshore import quotas
from lakeshore.actors.base import ActorRef
from lakeshore.actors.launcher import CountLocal
from lakeshore.actors.workers import ListWorkers
from lakeshore.bus.port import Bus
from lakeshore.errors import Unavailable
from lakeshore.model import DEFAULT_QUEUE, Namespace, NamespaceQuotas, QuotaUse
from lakeshore.quotas import Quotas
from lakeshore.services.pending import OrgRows, org_pending


async def namespace_quotas(
    ns: Namespace,
    *,
    limits: Quotas,
    store: OrgRows,
    bus: Bus,
    workers: ActorRef[Any],
    launcher: ActorRef[Any],
) -> NamespaceQuotas:
    """Each quota's value and what ``ns`` (queues) or its org (the others) uses of it.

    The pending count is left out (``used: null``) when NATS does not answer.
    """
    siblings = {n.name for n in await store.list_namespaces(ns.org)}
    queues = [q for q in await store.list_queues([ns.name]) if q.name != DEFAULT_QUEUE]
    daemons = quotas.daemons_in(await workers.ask(ListWorkers()), siblings)
    local = await launcher.ask(CountLocal(ns.org))
    try:
        pending: int | None = await org_pending(store, bus, ns.org)
    except Unavailable:
        pending = None
    return NamespaceQuotas(
        queues_per_namespace=QuotaUse(limit=limits.queues_per_namespace, used=len(queues)),
        daemons_per_org=QuotaUse(limit=limits.daemons_per_org, used=daemons),
        local_daemons_per_host=QuotaUse(limit=limits.local_daemons_per_host, used=local),
        pending_per_org=QuotaUse(limit=limits.pending_per_org, used=pending),
        elasticity_max=QuotaUse(limit=limits.elasticity_max),
        namespaces_per_org=QuotaUse(limit=limits.namespaces_per_org, used=len(siblings)),
        result_waits_per_org=QuotaUse(limit=limits.result_waits_per_org),
        result_waits_per_asker=QuotaUse(limit=limits.result_waits_per_asker),
    )
