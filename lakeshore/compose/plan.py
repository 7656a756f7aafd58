"""The plan: a pure function of a checked file and the live state, as ordered changes.

:func:`plan_up` makes what ``compose diff`` shows and ``compose up`` applies;
:func:`plan_down` what ``compose down`` applies. Neither sends anything (see
:mod:`lakeshore.compose.live` for the reads and :mod:`lakeshore.compose.apply` for the
writes).

Ownership is by label: what compose creates carries ``lakeshore.io/project: <project>``.
A declared object that already exists unlabelled is adopted (the label is added); one
labelled with another project cannot be (``!``). Live objects the file does not declare
are shown, never touched: ``? unmanaged`` when they are not the project's, ``? orphan``
when they are (``up --remove-orphans`` retires or archives orphans). Running daemons of no
project that match a daemon group are adopted only with ``adopt``
(:mod:`lakeshore.compose.adoption`).
"""

from __future__ import annotations

from lakeshore.compose.changes import (
    ArchiveQueue,
    Change,
    CreateNamespace,
    DeleteProvider,
    DeleteQueue,
    Op,
    Plan,
)
from lakeshore.compose.groups import daemon_changes, retire_changes
from lakeshore.compose.live import Live
from lakeshore.compose.loader import Declared
from lakeshore.compose.ownership import owned, removal, unowned
from lakeshore.compose.providers import provider_changes
from lakeshore.compose.queues import queue_changes
from lakeshore.model import QueueState


def plan_up(
    declared: Declared,
    live: dict[str, Live],
    *,
    remove_orphans: bool = False,
    adopt: bool = False,
) -> Plan:
    """The changes that make each declared namespace match the file.

    Args:
        live: a snapshot of every namespace the file declares.
        remove_orphans: retire the project's daemons, archive its queues and delete its
            providers that the file no longer declares (else they are only shown).
        adopt: a daemon group short of its count adopts the running daemons of no project
            that match it (else it launches none beside them: ``!``); see
            :mod:`lakeshore.compose.adoption`.
    """
    changes: list[Change] = []
    for ns, spec in declared.namespaces.items():
        now = live[ns]
        if not now.exists:
            changes.append(
                Change(
                    namespace=ns,
                    op=Op.CREATE,
                    subject="namespace",
                    name=ns,
                    action=CreateNamespace(),
                )
            )
        changes += provider_changes(ns, spec, now, declared.project, remove_orphans)
        changes += queue_changes(ns, spec, now, declared.project, remove_orphans, declared.code)
        changes += daemon_changes(ns, spec, now, declared.project, remove_orphans, adopt)
    return Plan(project=declared.project, namespaces=list(declared.namespaces), changes=changes)


def plan_down(declared: Declared, live: dict[str, Live], *, rm: bool = False) -> Plan:
    """The changes that take down what the file declares and this project owns: retire
    its daemon groups, archive its queues (``rm``: delete them, and its providers)."""
    changes: list[Change] = []
    project = declared.project
    for ns, spec in declared.namespaces.items():
        now = live[ns]
        for key in spec.daemons:
            changes += retire_changes(ns, key, now.workers, project)
        queues = {q.name: q for q in now.queues}
        for name in spec.queues:
            q = queues.get(name)
            if q is None:
                continue
            if not owned(q.labels, project):
                changes.append(unowned(ns, "queue", name, q.labels))
            elif rm:
                changes.append(removal(ns, "queue", name, "delete", DeleteQueue(name=name)))
            elif q.state is not QueueState.ARCHIVED:
                changes.append(removal(ns, "queue", name, "archive", ArchiveQueue(name=name)))
        if not rm:
            continue
        providers = {p.name: p for p in now.providers}
        for name in spec.providers:
            p = providers.get(name)
            if p is None:
                continue
            if not owned(p.labels, project):
                changes.append(unowned(ns, "provider", name, p.labels))
            else:
                changes.append(removal(ns, "provider", name, "delete", DeleteProvider(name=name)))
    return Plan(project=project, namespaces=list(declared.namespaces), changes=changes)


__all__ = ["plan_down", "plan_up"]
