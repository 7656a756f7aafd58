"""What a plan is made of: :class:`Change` s, each with the one :data:`Action` that applies it.

A change is a line of ``compose diff``; its action is what ``compose up`` (or ``down``)
sends for it. Changes that only inform (``?``) or that cannot be applied (``!``) have no
action.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from msgspec import Struct

from lakeshore.model import QueueCreate


class Op(StrEnum):
    #: ``+`` a namespace, provider or queue is created, or daemons are launched
    CREATE = "create"
    #: ``~`` fields of a live object are changed in place, or running daemons adopted
    PATCH = "patch"
    #: ``-`` daemons are retired, a queue archived or deleted, a provider deleted
    REMOVE = "remove"
    #: ``!`` the live object differs in a way that cannot be changed in place
    CANNOT = "cannot"
    #: ``?`` a live object the file does not declare and this project does not own
    UNMANAGED = "unmanaged"
    #: ``?`` a live object this project created that the file no longer declares
    ORPHAN = "orphan"


#: How each op is written in a plan.
SYMBOLS = {
    Op.CREATE: "+",
    Op.PATCH: "~",
    Op.REMOVE: "-",
    Op.CANNOT: "!",
    Op.UNMANAGED: "?",
    Op.ORPHAN: "?",
}
#: The ops that make a file out of sync with the live system (``diff`` exits 3).
PENDING = frozenset({Op.CREATE, Op.PATCH, Op.REMOVE, Op.CANNOT})


class FieldChange(Struct, frozen=True, kw_only=True):
    """One field of a live object, as it is and as the file wants it."""

    #: dotted for the elasticity object's fields: ``elasticity.max``
    field: str
    old: Any
    new: Any


class WorkerRef(Struct, frozen=True, kw_only=True):
    """A worker by id (what is sent) and name (what is shown)."""

    id: str
    name: str


# ---- actions: one request (or one per daemon) each ------------------------------------


class CreateNamespace(Struct, frozen=True, kw_only=True, tag="create_namespace"):
    pass


class CreateProvider(Struct, frozen=True, kw_only=True, tag="create_provider"):
    name: str
    kind: str
    config: dict[str, Any]
    labels: dict[str, str]


class PatchProvider(Struct, frozen=True, kw_only=True, tag="patch_provider"):
    """Replace the provider's config and/or labels (``None``: leave it)."""

    name: str
    config: dict[str, Any] | None = None
    labels: dict[str, str] | None = None


class DeleteProvider(Struct, frozen=True, kw_only=True, tag="delete_provider"):
    name: str


class CreateQueue(Struct, frozen=True, kw_only=True, tag="create_queue", omit_defaults=True):
    body: QueueCreate
    #: the directory whose snapshot ``body.code`` names, uploaded before the queue is made
    code_dir: str | None = None


class PatchQueue(Struct, frozen=True, kw_only=True, tag="patch_queue", omit_defaults=True):
    """A queue PATCH body; its ``elasticity`` is the complete object (nothing is merged)."""

    name: str
    body: dict[str, Any]
    #: the directory whose snapshot ``body["code"]`` names, uploaded before the patch
    code_dir: str | None = None


class UnarchiveQueue(Struct, frozen=True, kw_only=True, tag="unarchive_queue"):
    name: str


class ArchiveQueue(Struct, frozen=True, kw_only=True, tag="archive_queue"):
    name: str


class DeleteQueue(Struct, frozen=True, kw_only=True, tag="delete_queue"):
    """``queues rm --force``: members are scrubbed of it first."""

    name: str


class LaunchDaemons(Struct, frozen=True, kw_only=True, tag="launch_daemons"):
    """One daemon per name (each launched alone, so each gets exactly its name)."""

    provider: str
    queues: list[str]
    labels: dict[str, str]
    names: list[str]


class RetireDaemons(Struct, frozen=True, kw_only=True, tag="retire_daemons"):
    workers: list[WorkerRef]


class AdoptDaemons(Struct, frozen=True, kw_only=True, tag="adopt_daemons"):
    """Label running daemons as the group's (``labels``: their labels from now on)."""

    workers: list[WorkerRef]
    labels: dict[str, str]


class EditMembership(Struct, frozen=True, kw_only=True, tag="edit_membership"):
    worker: WorkerRef
    add: list[str]
    remove: list[str]


Action = (
    CreateNamespace
    | CreateProvider
    | PatchProvider
    | DeleteProvider
    | CreateQueue
    | PatchQueue
    | UnarchiveQueue
    | ArchiveQueue
    | DeleteQueue
    | LaunchDaemons
    | RetireDaemons
    | AdoptDaemons
    | EditMembership
)


class Change(Struct, frozen=True, kw_only=True):
    """One line (or, for a patch, one line per field) of a plan."""

    namespace: str
    op: Op
    #: ``namespace``, ``provider``, ``queue``, ``daemons`` (a group) or ``daemon`` (one)
    subject: str
    name: str
    #: what is done or why, e.g. ``priority, elastic 1..8 on my-gpu`` or ``launch prep-00``
    summary: str = ""
    fields: list[FieldChange] = []
    action: Action | None = None


class Plan(Struct, frozen=True, kw_only=True):
    """Every change, in the order they are applied: per namespace, providers, then
    queues, then daemons (``down``: daemons, then queues, then providers)."""

    project: str
    #: the namespaces the file declares, in its order
    namespaces: list[str]
    changes: list[Change]

    @property
    def pending(self) -> bool:
        """Whether the live system differs from the file (``diff`` exits 3)."""
        return any(c.op in PENDING for c in self.changes)

    @property
    def actions(self) -> list[Change]:
        """The changes that send something."""
        return [c for c in self.changes if c.action is not None]


__all__ = [
    "PENDING",
    "SYMBOLS",
    "Action",
    "AdoptDaemons",
    "ArchiveQueue",
    "Change",
    "CreateNamespace",
    "CreateProvider",
    "CreateQueue",
    "DeleteProvider",
    "DeleteQueue",
    "EditMembership",
    "FieldChange",
    "LaunchDaemons",
    "Op",
    "PatchProvider",
    "PatchQueue",
    "Plan",
    "RetireDaemons",
    "UnarchiveQueue",
    "WorkerRef",
]
