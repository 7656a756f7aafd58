"""The controller's rule book: pure functions from a snapshot to decisions.

See :mod:`lakeshore.controller.rules` for the order of the rules and the modules it
composes for the choices made where spec/elasticity.md is silent.
"""

from lakeshore.controller.decisions import (
    Decision,
    Explanation,
    GrantSteal,
    Launch,
    MarkLost,
    Retire,
    Scope,
    TickResult,
)
from lakeshore.controller.fleet import satisfies
from lakeshore.controller.policies import desired, idle_wait_s
from lakeshore.controller.pools import fair_shares
from lakeshore.controller.rules import tick
from lakeshore.controller.snapshot import (
    POOL_LABEL,
    QUEUE_LABEL,
    ControllerSettings,
    Lease,
    QueueLoad,
    Snapshot,
)

__all__ = [
    "POOL_LABEL",
    "QUEUE_LABEL",
    "ControllerSettings",
    "Decision",
    "Explanation",
    "GrantSteal",
    "Launch",
    "Lease",
    "MarkLost",
    "QueueLoad",
    "Retire",
    "Scope",
    "Snapshot",
    "TickResult",
    "desired",
    "fair_shares",
    "idle_wait_s",
    "satisfies",
    "tick",
]
