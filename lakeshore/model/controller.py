"""The controller's status as the API answers it: per queue and pool, and the live leases.

``GET /v1/namespaces/:ns/controller`` answers a :class:`ControllerStatus`; the SDK and CLI
decode it from here, without importing the rule book (:mod:`lakeshore.controller`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from msgspec import Struct


class Scope(StrEnum):
    #: a queue scaled on its own
    QUEUE = "queue"
    #: a pool of queues scaled as one fleet
    POOL = "pool"


class UnitStatus(Struct, frozen=True, kw_only=True):
    """One scaling unit (a queue, or a pool) as the last tick saw it."""

    namespace: str
    scope: Scope
    #: the queue's or the pool's name
    name: str
    #: for a queue in a pool, the pool's name
    pool: str | None = None
    #: the policy in a few words: ``elastic 1..4``, ``fixed``, ``pool max 6``
    policy: str
    #: the most managed daemons: the queue's ``max``, or the pool's cap
    max: int
    #: managed daemons wanted (a pool member: its share of the pool)
    desired: int
    #: managed daemons up and registered (idle or busy)
    actual: int
    #: managed daemons launched and not registered yet, this tick's launches included
    launching: int
    #: why, with the numbers the rule book used
    reason: str
    #: the last failure to apply a decision for this unit (it is retried every tick)
    error: str | None = None
    #: every daemon up and serving the unit, hand-launched ones included (``actual`` counts
    #: the managed ones only)
    total: int = 0


class LeaseStatus(Struct, frozen=True, kw_only=True):
    """A live steal lease: ``worker`` may pull from ``queue`` after its own until ``until``."""

    worker_id: str
    worker: str
    queue: str
    until: datetime


class ControllerStatus(Struct, frozen=True, kw_only=True):
    """``GET /v1/namespaces/:ns/controller``: the namespace's units and leases."""

    namespace: str
    #: ticks run since the control plane started (0: none yet, the lists are empty)
    ticks: int
    #: when the last tick's snapshot was taken
    tick_at: datetime | None = None
    #: queues first, then pools, each by name
    units: list[UnitStatus] = []
    leases: list[LeaseStatus] = []
