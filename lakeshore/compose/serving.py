"""Who still serves a queue that ``compose down`` would take away.

``down`` retires the project's own daemons, so only others are in the way: hand-launched
daemons that are starting, idle or busy, pull from the queue and do not carry this
project's label. Archiving (or deleting) the queue under them would leave them serving
nothing, so ``down`` refuses and changes nothing unless ``--force`` is given. Controller-
managed daemons follow their queue's state and are not counted; retiring, lost and stopped
ones are on their way out.
"""

from __future__ import annotations

from msgspec import Struct

from lakeshore.compose.changes import ArchiveQueue, DeleteQueue, Plan
from lakeshore.compose.live import Live
from lakeshore.compose.ownership import owned
from lakeshore.model import Worker, WorkerStatus, serves

#: The statuses of a daemon that still pulls work.
_SERVING = frozenset({WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY})


class Served(Struct, frozen=True, kw_only=True):
    """A queue the plan takes down that daemons the project does not own still serve."""

    namespace: str
    queue: str
    #: ``archive`` or ``delete``
    verb: str
    #: their names, sorted
    daemons: list[str]

    def message(self, several_namespaces: bool = False) -> str:
        """``cpu-prep is served by prep-00, prep-01, which this project does not own; …``"""
        where = f" (namespace {self.namespace})" if several_namespaces else ""
        return (
            f"{self.queue}{where} is served by {', '.join(self.daemons)}, which this project "
            f"does not own; stop them first, or pass --force to {self.verb} it anyway"
        )


def served_by_others(plan: Plan, live: dict[str, Live]) -> list[Served]:
    """The queues ``plan`` archives or deletes that are served by daemons not of
    ``plan.project``, in the plan's order.

    Args:
        live: the snapshot ``plan`` was made against.
    """
    out = []
    for change in plan.changes:
        match change.action:
            case ArchiveQueue(name=name):
                verb = "archive"
            case DeleteQueue(name=name):
                verb = "delete"
            case _:
                continue
        others = [
            w.name for w in live[change.namespace].workers if _serves_for_others(w, name, plan)
        ]
        if others:
            out.append(
                Served(namespace=change.namespace, queue=name, verb=verb, daemons=sorted(others))
            )
    return out


def _serves_for_others(w: Worker, queue: str, plan: Plan) -> bool:
    return (
        not w.managed
        and w.status in _SERVING
        and serves(w, queue)
        and not owned(w.labels, plan.project)
    )


__all__ = ["Served", "served_by_others"]
