"""The ``queues:`` of a file against a namespace's live queues.

A declared queue is compared field by field, its elasticity object after the server's own
defaults for its kind have filled in what the file leaves out
(:func:`~lakeshore.compose.spec.desired_elasticity`), so a file that omits a default is in
sync with the queue the server made of it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lakeshore.compose.changes import (
    ArchiveQueue,
    Change,
    CreateQueue,
    FieldChange,
    Op,
    PatchQueue,
    UnarchiveQueue,
)
from lakeshore.compose.live import Live
from lakeshore.compose.loader import CodeDir
from lakeshore.compose.ownership import ours_or_free, owned, stray, unowned
from lakeshore.compose.spec import NamespaceSpec, QueueSpec, desired_elasticity, with_labels
from lakeshore.model import (
    DEFAULT_QUEUE,
    Elasticity,
    ElasticityKind,
    Queue,
    QueueCreate,
    QueueState,
)

_QUEUE_FIELDS = ("description", "max_depth", "on_full", "defaults")


def queue_changes(
    ns: str,
    spec: NamespaceSpec,
    now: Live,
    project: str,
    remove_orphans: bool,
    code: dict[str, CodeDir] | None = None,
) -> list[Change]:
    """Create the declared queues that are missing; unarchive and patch, field by field,
    those that differ; show (or, ``remove_orphans``, archive) the undeclared ones.

    Args:
        code: each ``code:`` directory of the file, packed (the plan names its digest).
    """
    changes = []
    live = {q.name: q for q in now.queues}
    for name, want in spec.queues.items():
        elasticity = desired_elasticity(want)
        labels = with_labels(want.labels, project)
        shipped = None if want.code is None else (code or {})[want.code]
        have = live.get(name)
        if have is None:
            body = QueueCreate(
                name=name,
                kind=want.kind,
                description=want.description,
                max_depth=want.max_depth,
                on_full=want.on_full,
                elasticity=msgspec.to_builtins(elasticity),
                labels=labels,
                code=shipped.digest if shipped else None,
                defaults=want.defaults,
            )
            changes.append(
                Change(
                    namespace=ns,
                    op=Op.CREATE,
                    subject="queue",
                    name=name,
                    summary=f"{want.kind}, {describe_elasticity(elasticity)}",
                    action=CreateQueue(body=body, code_dir=shipped.path if shipped else None),
                )
            )
        else:
            changes += _patch(ns, name, want, elasticity, labels, have, project, shipped)
    for q in now.queues:
        if q.name in spec.queues or q.name == DEFAULT_QUEUE:
            continue
        if owned(q.labels, project) and q.state is QueueState.ARCHIVED:
            continue  # taken down already: nothing is left to do
        changes += stray(
            ns,
            "queue",
            q.name,
            q.labels,
            project,
            remove_orphans,
            ArchiveQueue(name=q.name),
            "archive",
        )
    return changes


def _patch(
    ns: str,
    name: str,
    want: QueueSpec,
    elasticity: Elasticity,
    labels: dict[str, str],
    have: Queue,
    project: str,
    shipped: CodeDir | None,
) -> list[Change]:
    if not ours_or_free(have.labels, project):
        return [unowned(ns, "queue", name, have.labels, Op.CANNOT)]
    if have.kind != want.kind:
        return [
            Change(
                namespace=ns,
                op=Op.CANNOT,
                subject="queue",
                name=name,
                summary=f"a queue's kind is fixed: delete it (lakeshore queues rm {name} "
                "--force) and run up again to recreate it",
                fields=[FieldChange(field="kind", old=str(have.kind), new=str(want.kind))],
            )
        ]
    changes = []
    if have.state in (QueueState.ARCHIVED, QueueState.DRAINING):
        changes.append(
            Change(
                namespace=ns,
                op=Op.PATCH,
                subject="queue",
                name=name,
                summary="unarchive",
                fields=[FieldChange(field="state", old=str(have.state), new="active")],
                action=UnarchiveQueue(name=name),
            )
        )
    fields: list[FieldChange] = []
    body: dict[str, Any] = {}
    for field in _QUEUE_FIELDS:
        old, new = getattr(have, field), getattr(want, field)
        if old != new:
            fields.append(FieldChange(field=field, old=plain(old), new=plain(new)))
            body[field] = plain(new)
    for field in Elasticity.__struct_fields__:
        old, new = getattr(have.elasticity, field), getattr(elasticity, field)
        if old != new:
            fields.append(FieldChange(field=f"elasticity.{field}", old=plain(old), new=plain(new)))
            # The whole object: the server merges a partial one into the current.
            body["elasticity"] = msgspec.to_builtins(elasticity)
    if have.labels != labels:
        fields.append(FieldChange(field="labels", old=have.labels, new=labels))
        body["labels"] = labels
    digest = shipped.digest if shipped else None
    if have.code != digest:
        fields.append(FieldChange(field="code", old=have.code, new=digest))
        body["code"] = digest
    if fields:
        code_dir = shipped.path if shipped and "code" in body else None
        changes.append(
            Change(
                namespace=ns,
                op=Op.PATCH,
                subject="queue",
                name=name,
                fields=fields,
                action=PatchQueue(name=name, body=body, code_dir=code_dir),
            )
        )
    return changes


def describe_elasticity(e: Elasticity) -> str:
    """``fixed``, or ``elastic 1..8 on my-gpu`` (and ``pool gpu``)."""
    if e.kind is ElasticityKind.FIXED:
        return "fixed"
    text = f"{e.kind} {e.min}..{e.max} on {e.provider}"
    return text + (f" pool {e.pool}" if e.pool else "")


def plain(value: Any) -> Any:
    """A field's value as JSON-ready builtins (enums as their strings)."""
    return msgspec.to_builtins(value)


__all__ = ["describe_elasticity", "plain", "queue_changes"]
