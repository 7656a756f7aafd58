"""Who owns a live object: the project whose label it carries.

What compose creates carries ``lakeshore.io/project: <project>``. A declared object that
exists unlabelled is adopted (``up`` adds the label); one labelled with another project
is not this file's to change. Live objects the file does not declare are shown, never
touched: ``? unmanaged`` when they are not the project's, ``? orphan`` when they are.
"""

from __future__ import annotations

from typing import Any

from lakeshore.compose.changes import Change, Op
from lakeshore.compose.spec import PROJECT_LABEL


def owned(labels: dict[str, str], project: str) -> bool:
    """Whether an object carries ``project``'s label."""
    return labels.get(PROJECT_LABEL) == project


def ours_or_free(labels: dict[str, str], project: str) -> bool:
    """Whether an object is ``project``'s or no project's (a declared one is adopted)."""
    return labels.get(PROJECT_LABEL) in (None, project)


def unowned(
    ns: str, subject: str, name: str, labels: dict[str, str], op: Op = Op.UNMANAGED
) -> Change:
    """A declared object that is not this project's: left alone (``?``), or, when the file
    would change it, a ``!`` naming its owner."""
    owner = labels.get(PROJECT_LABEL)
    why = f"belongs to project {owner}" if owner else "not created by this project"
    if op is Op.CANNOT:
        why += ": remove it from one of the files, or use that project (-p)"
    else:
        why += ": left alone"
    return Change(namespace=ns, op=op, subject=subject, name=name, summary=why)


def stray(
    ns: str,
    subject: str,
    name: str,
    labels: dict[str, str],
    project: str,
    remove: bool,
    action: Any,
    verb: str,
) -> list[Change]:
    """A live object the file does not declare: the project's orphan, or unmanaged."""
    if not owned(labels, project):
        return [Change(namespace=ns, op=Op.UNMANAGED, subject=subject, name=name)]
    if remove:
        return [removal(ns, subject, name, f"{verb} (orphan)", action)]
    return [
        Change(
            namespace=ns,
            op=Op.ORPHAN,
            subject=subject,
            name=name,
            summary=f"up --remove-orphans would {verb} it",
        )
    ]


def removal(ns: str, subject: str, name: str, summary: str, action: Any) -> Change:
    """A ``-`` change."""
    return Change(
        namespace=ns, op=Op.REMOVE, subject=subject, name=name, summary=summary, action=action
    )


__all__ = ["owned", "ours_or_free", "removal", "stray", "unowned"]
