"""Every type that crosses a process boundary: rows, HTTP bodies and bus messages.

Wire types evolve by adding defaulted fields at the end. Request bodies (``*Create``,
``*Patch``, ``*Edit``) forbid unknown fields so that a typo is a 400, not a silent no-op.
"""

from lakeshore.model.access import Namespace, NamespaceCreate, Token, TokenCreate, TokenCreated
from lakeshore.model.names import (
    DEFAULT_QUEUE,
    DEFAULT_QUEUE_DESCRIPTION,
    NAME_MAX,
    NAME_PATTERN,
    PRIORITY_LEVELS,
    ErrorBody,
    ErrorDetail,
    now,
    validate_name,
)
from lakeshore.model.queues import (
    Elasticity,
    ElasticityKind,
    OnFull,
    Queue,
    QueueCreate,
    QueueDetail,
    QueueEvent,
    QueueKind,
    QueuePatch,
    QueueState,
    QueueStats,
)
from lakeshore.model.workers import Member, MembershipEdit, Worker, WorkerRegister, WorkerStatus

__all__ = [
    "DEFAULT_QUEUE",
    "DEFAULT_QUEUE_DESCRIPTION",
    "NAME_MAX",
    "NAME_PATTERN",
    "PRIORITY_LEVELS",
    "Elasticity",
    "ElasticityKind",
    "ErrorBody",
    "ErrorDetail",
    "Member",
    "MembershipEdit",
    "Namespace",
    "NamespaceCreate",
    "OnFull",
    "Queue",
    "QueueCreate",
    "QueueDetail",
    "QueueEvent",
    "QueueKind",
    "QueuePatch",
    "QueueState",
    "QueueStats",
    "Token",
    "TokenCreate",
    "TokenCreated",
    "Worker",
    "WorkerRegister",
    "WorkerStatus",
    "now",
    "validate_name",
]
