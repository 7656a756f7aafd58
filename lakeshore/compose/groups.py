"""Daemon groups: the ``daemons:`` entries of a file, kept at their count.

The members of group ``train`` are the hand-launched (not controller-managed) workers
labelled ``lakeshore.io/project=<project>`` and ``lakeshore.io/daemon=train`` that are
starting, idle or busy; retiring, lost and stopped ones do not count. So:

- fewer members than ``count``: launch the missing ones. A lost member is relaunched under
  its own name; then the canonical names (``daemon_names(stem, count)``) not held by a
  live worker of the namespace; then the next free ``<stem>-NN``.
- more: retire the extras, idle ones first, then the highest names.
- a member whose queues differ has its membership edited in place; one whose provider or
  labels differ cannot be changed (``!``): it must be retired and replaced.
- a group short of its count first looks at the running daemons no project owns that match
  it (:mod:`lakeshore.compose.adoption`): ``--adopt`` adopts them, else it launches none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from lakeshore.compose import adoption
from lakeshore.compose.adoption import Adoption
from lakeshore.compose.changes import (
    Change,
    EditMembership,
    FieldChange,
    LaunchDaemons,
    Op,
    RetireDaemons,
    WorkerRef,
)
from lakeshore.compose.live import Live
from lakeshore.compose.ownership import owned
from lakeshore.compose.spec import (
    DAEMON_LABEL,
    PROJECT_LABEL,
    DaemonSpec,
    NamespaceSpec,
    daemon_stem,
    with_labels,
)
from lakeshore.model import BUILTIN_PROVIDER, Worker, WorkerStatus, daemon_names

#: Workers that are members of their group (and count toward its ``count``).
MEMBER = frozenset({WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY})
#: Workers whose name is free for a new daemon (the server replaces their rows).
DEAD = frozenset({WorkerStatus.LOST, WorkerStatus.STOPPED})


def project_workers(workers: Iterable[Worker], project: str) -> list[Worker]:
    """The hand-launched workers labelled with ``project``, by name."""
    return sorted(
        (w for w in workers if not w.managed and w.labels.get(PROJECT_LABEL) == project),
        key=lambda w: w.name,
    )


def group_changes(
    namespace: str,
    key: str,
    spec: DaemonSpec,
    workers: list[Worker],
    project: str,
    providers: set[str],
    *,
    unowned: Sequence[Worker] = (),
    adopt: bool = False,
) -> tuple[list[Change], Adoption]:
    """What keeps group ``key`` at ``spec``.

    Args:
        workers: every worker of the namespace.
        providers: the providers daemons can be launched on (declared or live).
        unowned: the running daemons no project owns that the group may adopt
            (:func:`adoption.unowned`, less those an earlier group named).
        adopt: adopt those that match (``--adopt``).

    Returns:
        The group's changes, and what it made of ``unowned``.
    """
    ours = [w for w in project_workers(workers, project) if w.labels.get(DAEMON_LABEL) == key]
    members = [w for w in ours if w.status in MEMBER]
    labels = with_labels(spec.labels, project, key)
    changes = [c for w in members if (c := _fixed_fields(namespace, w, spec, labels))]
    stem = daemon_stem(key, spec)
    found = adoption.consider(
        namespace, key, spec, stem, labels, spec.count - len(members), list(unowned), adopt=adopt
    )

    retired = _extras(members, len(members) - spec.count)
    if retired:
        changes.append(
            Change(
                namespace=namespace,
                op=Op.REMOVE,
                subject="daemons",
                name=key,
                summary="retire " + " ".join(w.name for w in retired),
                action=RetireDaemons(workers=[WorkerRef(id=w.id, name=w.name) for w in retired]),
            )
        )
    kept = [w for w in members if w not in retired]
    changes += [c for w in kept if (c := _membership(namespace, w, spec))]
    changes += found.changes

    need = spec.count - len(members) - len(found.adopted)
    if need <= 0 or found.withheld:
        return changes, found
    if spec.provider not in providers:
        changes.append(
            Change(
                namespace=namespace,
                op=Op.CANNOT,
                subject="daemons",
                name=key,
                summary=f"provider {spec.provider} does not exist: declare it under providers: "
                "or create it (lakeshore providers add)",
            )
        )
        return changes, found
    held = {w.name for w in workers if w.status not in DEAD}
    names = _new_names(
        stem, spec.count, need, held, [w for w in ours if w.status is WorkerStatus.LOST]
    )
    changes.append(
        Change(
            namespace=namespace,
            op=Op.CREATE,
            subject="daemons",
            name=key,
            summary=f"launch {' '.join(names)} on {spec.provider}",
            action=LaunchDaemons(
                provider=spec.provider, queues=list(spec.queues), labels=labels, names=names
            ),
        )
    )
    return changes, found


def retire_changes(namespace: str, key: str, workers: list[Worker], project: str) -> list[Change]:
    """``down``: retire every member of group ``key``."""
    members = [
        w
        for w in project_workers(workers, project)
        if w.labels.get(DAEMON_LABEL) == key and w.status in MEMBER
    ]
    if not members:
        return []
    return [
        Change(
            namespace=namespace,
            op=Op.REMOVE,
            subject="daemons",
            name=key,
            summary="retire " + " ".join(w.name for w in members),
            action=RetireDaemons(workers=[WorkerRef(id=w.id, name=w.name) for w in members]),
        )
    ]


def daemon_changes(
    ns: str,
    spec: NamespaceSpec,
    now: Live,
    project: str,
    remove_orphans: bool,
    adopt: bool = False,
) -> list[Change]:
    """Every group's changes (:func:`group_changes`), then the project's daemons of groups
    the file no longer declares (orphans: shown, or retired with ``remove_orphans``), then
    the hand-launched daemons of no project's (unmanaged: shown, with why a group did not
    adopt them; not those a group's line names)."""
    providers = {BUILTIN_PROVIDER, *spec.providers, *(p.name for p in now.providers)}
    changes = []
    free = adoption.unowned(now.workers)
    named: set[str] = set()
    notes: dict[str, str] = {}
    for key, want in spec.daemons.items():
        left = [w for w in free if w.name not in named]
        kept, found = group_changes(
            ns, key, want, now.workers, project, providers, unowned=left, adopt=adopt
        )
        changes += kept
        named |= found.named
        notes = {**found.notes, **notes}  # the first group to look at a daemon explains it
    orphans: dict[str, list[WorkerRef]] = {}
    for w in project_workers(now.workers, project):
        group = w.labels.get(DAEMON_LABEL, "")
        if group not in spec.daemons and w.status in MEMBER:
            orphans.setdefault(group, []).append(WorkerRef(id=w.id, name=w.name))
    for group, refs in orphans.items():
        names = " ".join(r.name for r in refs)
        if remove_orphans:
            changes.append(
                Change(
                    namespace=ns,
                    op=Op.REMOVE,
                    subject="daemons",
                    name=group or "-",
                    summary=f"retire {names} (orphans)",
                    action=RetireDaemons(workers=refs),
                )
            )
        else:
            changes += [
                Change(
                    namespace=ns,
                    op=Op.ORPHAN,
                    subject="daemon",
                    name=r.name,
                    summary=f"group {group or '-'}; up --remove-orphans retires it",
                )
                for r in refs
            ]
    for w in sorted(now.workers, key=lambda w: w.name):
        if w.name in named:
            continue
        if not w.managed and w.status in MEMBER and not owned(w.labels, project):
            why = notes.get(w.name, "")
            changes.append(
                Change(namespace=ns, op=Op.UNMANAGED, subject="daemon", name=w.name, summary=why)
            )
    return changes


def canonical_names(stem: str, count: int) -> list[str]:
    """The names a launch of ``count`` daemons named ``stem`` gives them (the launcher's
    own rule)."""
    return daemon_names(stem, count) if count else []


def _fixed_fields(namespace: str, w: Worker, spec: DaemonSpec, labels: dict[str, str]):
    fields = []
    if w.provider != spec.provider:
        fields.append(FieldChange(field="provider", old=w.provider, new=spec.provider))
    if w.labels != labels:
        fields.append(FieldChange(field="labels", old=w.labels, new=labels))
    if not fields:
        return None
    return Change(
        namespace=namespace,
        op=Op.CANNOT,
        subject="daemon",
        name=w.name,
        summary=f"a running daemon keeps them: retire it (lakeshore daemon stop {w.name}) "
        "and run up again to launch a replacement",
        fields=fields,
    )


def _membership(namespace: str, w: Worker, spec: DaemonSpec) -> Change | None:
    if set(w.queues) == set(spec.queues):
        return None
    add = [q for q in spec.queues if q not in w.queues]
    remove = [q for q in w.queues if q not in spec.queues]
    return Change(
        namespace=namespace,
        op=Op.PATCH,
        subject="daemon",
        name=w.name,
        fields=[FieldChange(field="queues", old=list(w.queues), new=list(spec.queues))],
        action=EditMembership(worker=WorkerRef(id=w.id, name=w.name), add=add, remove=remove),
    )


def _extras(members: list[Worker], extra: int) -> list[Worker]:
    """The ``extra`` members to retire: idle ones first, then the highest names."""
    if extra <= 0:
        return []
    by_name = sorted(members, key=lambda w: w.name, reverse=True)
    return sorted(by_name, key=lambda w: w.status is not WorkerStatus.IDLE)[:extra]


def _new_names(stem: str, count: int, need: int, held: set[str], lost: list[Worker]) -> list[str]:
    own = re.compile(rf"{re.escape(stem)}(-\d\d)?")
    lost_names = [w.name for w in lost if own.fullmatch(w.name)]
    names: list[str] = []
    for name in [*lost_names, *canonical_names(stem, count)]:
        if len(names) < need and name not in held and name not in names:
            names.append(name)
    i = 0
    while len(names) < need:
        name = f"{stem}-{i:02d}"
        if name not in held and name not in names:
            names.append(name)
        i += 1
    return names


__all__ = [
    "DEAD",
    "MEMBER",
    "canonical_names",
    "group_changes",
    "project_workers",
    "retire_changes",
]
