"""ControllerActor: each Tick reads queue rows from the store, workers from the registry
and backlogs from the bus, then launches, retires and lends through the actors that own
them, recording every applied decision as queue events. The Launcher's backend is a
recording one: nothing is started."""

from __future__ import annotations

from typing import Any

import pytest

from lakeshore.actors.base import ActorRef, Runtime
from lakeshore.actors.controller import (
    ControllerActor,
    ControllerMsg,
    Halt,
    PendingHint,
    Status,
    Tick,
)
from lakeshore.actors.launcher import LauncherMsg
from lakeshore.actors.queue import Submit
from lakeshore.actors.workers import Beat, ListWorkers, Register, WorkerMsg
from lakeshore.bus.memory import InMemoryBus
from lakeshore.controller import QUEUE_LABEL, ControllerSettings
from lakeshore.errors import Conflict, Unavailable
from lakeshore.model import (
    ControllerStatus,
    Elasticity,
    ElasticityKind,
    Heartbeat,
    Scope,
    Worker,
    WorkerRegister,
    WorkerStatus,
    now,
)
from lakeshore.store.memory import InMemoryStore

from .conftest import SpawnQueue
from .support import NS, RecordingBackend, call, fail_once, queue_events, settle

ELASTIC = Elasticity(kind=ElasticityKind.FULLY_ELASTIC, max=2, target_pending=1,
                     scale_down_idle_s=0.0)  # fmt: skip


@pytest.fixture
async def controller(
    runtime: Runtime,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
    launcher: ActorRef[LauncherMsg],
) -> ActorRef[ControllerMsg]:
    actor = ControllerActor(store=store, bus=bus, workers=registry, launcher=launcher,
                            settings=ControllerSettings())  # fmt: skip
    return await runtime.spawn(actor)


async def backlog(spawn_queue: SpawnQueue, name: str, pending: int, **row: Any) -> None:
    """A queue with ``pending`` invocations waiting."""
    ref = await spawn_queue(name, **row)
    await settle(await ref.ask(Submit([call(n) for n in range(pending)], actor=None)))


async def unit(controller: ActorRef[ControllerMsg], name: str) -> Any:
    status: ControllerStatus = await controller.ask(Status(NS))
    return next(u for u in status.units if (u.scope, u.name) == (Scope.QUEUE, name))


async def come_up(registry: ActorRef[WorkerMsg], rows: list[Worker]) -> None:
    """The launched daemons register with the ids they were given."""
    for w in rows:
        reg = WorkerRegister(namespace=NS, name=w.name, id=w.id, queues=w.queues,
                             labels=w.labels, provider=w.provider, managed=w.managed)  # fmt: skip
        await registry.ask(Register(reg))


async def test_pending_work_on_a_fully_elastic_queue_launches_managed_daemons(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    store: InMemoryStore,
) -> None:
    await backlog(spawn_queue, "q", 3, elasticity=ELASTIC)
    assert await controller.ask(Tick()) == 1
    [rows] = backend.launches
    assert len(rows) == 2  # 3 pending at target 1, capped at max 2
    assert all(w.managed and w.labels == {QUEUE_LABEL: "q"} for w in rows)
    assert all(w.queues == ["q"] and w.status is WorkerStatus.STARTING for w in rows)
    types = [e.type for e in await queue_events(store, "q")]
    assert types == ["daemons_launched", "scale.decision", "scaled_up"]
    [decision] = await queue_events(store, "q", "scale.decision")
    assert decision.actor is None and decision.detail is not None
    assert (decision.detail["decision"], decision.detail["count"]) == ("launch", 2)
    assert "desired 2" in decision.detail["reason"]
    assert decision.detail["inputs"]["pending"] == 3
    [up] = await queue_events(store, "q", "scaled_up")
    assert up.detail is not None
    assert up.detail["ids"] == [w.id for w in rows]


async def test_status_answers_the_unit_as_the_last_tick_saw_it(
    controller: ActorRef[ControllerMsg], spawn_queue: SpawnQueue
) -> None:
    empty: ControllerStatus = await controller.ask(Status(NS))
    assert (empty.ticks, empty.tick_at, empty.units) == (0, None, [])
    await backlog(spawn_queue, "q", 3, elasticity=ELASTIC)
    await controller.ask(Tick())
    status: ControllerStatus = await controller.ask(Status(NS))
    assert status.ticks == 1 and status.tick_at is not None
    [q] = status.units
    assert (q.name, q.scope, q.policy, q.max) == ("q", Scope.QUEUE, "fully_elastic 0..2", 2)
    assert (q.desired, q.actual, q.launching, q.error) == (2, 0, 2, None)
    assert q.reason.endswith("0 up, 0 launching → launch 2")
    assert (await controller.ask(Status("other"))).units == []


async def test_launched_daemons_are_not_launched_again_and_count_once_registered(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    registry: ActorRef[WorkerMsg],
) -> None:
    await backlog(spawn_queue, "q", 3, elasticity=ELASTIC)
    await controller.ask(Tick())
    assert await controller.ask(PendingHint(NS, "q")) == "scaling_up"
    assert await controller.ask(Tick()) == 0  # still starting: counted as launching
    assert len(backend.launches) == 1
    assert (await unit(controller, "q")).launching == 2
    await come_up(registry, backend.launched)
    assert await controller.ask(Tick()) == 0
    q = await unit(controller, "q")
    assert (q.desired, q.actual, q.launching) == (2, 2, 0)
    assert await controller.ask(PendingHint(NS, "q")) is None
    assert len(backend.launches) == 1


async def test_idle_managed_daemons_are_retired_when_the_work_is_done(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    registry: ActorRef[WorkerMsg],
    bus: InMemoryBus,
    store: InMemoryStore,
) -> None:
    await backlog(spawn_queue, "q", 2, elasticity=ELASTIC)
    await controller.ask(Tick())
    await come_up(registry, backend.launched)
    for seq, _ in bus.claim(NS, "q", 0, 10):
        bus.ack(NS, "q", seq)  # the daemons ran everything
    assert await controller.ask(Tick()) == 2
    rows = await registry.ask(ListWorkers(NS))
    assert {w.status for w in rows} == {WorkerStatus.RETIRING}
    downs = await queue_events(store, "q", "scaled_down")
    assert sorted((e.detail or {})["worker"] for e in downs) == sorted(w.id for w in rows)
    hb = Heartbeat(worker_id=rows[0].id, namespace=NS, status=WorkerStatus.IDLE, ts=now())
    assert (await registry.ask(Beat(hb))).retire is True  # told in its next heartbeat
    assert backend.stops == []  # retired, never killed
    assert (await unit(controller, "q")).desired == 0


async def test_a_lost_managed_daemon_is_replaced_and_the_replacement_recorded(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    registry: ActorRef[WorkerMsg],
    store: InMemoryStore,
) -> None:
    await backlog(spawn_queue, "q", 3, elasticity=ELASTIC)
    await controller.ask(Tick())
    first = backend.launched
    await come_up(registry, first)
    await controller.ask(Tick())
    backend.exit(first[0].id, 1, "exited with 1")  # the registry marks it lost
    assert await controller.ask(Tick()) == 1
    [_, [replacement]] = backend.launches
    [replaced] = await queue_events(store, "q", "daemon_replaced")
    assert replaced.detail is not None
    assert (replaced.detail["lost"], replaced.detail["by"]) == (first[0].id, replacement.id)


async def test_halt_stops_every_decision(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    store: InMemoryStore,
) -> None:
    await backlog(spawn_queue, "q", 3, elasticity=ELASTIC)
    assert await controller.ask(Halt()) is None
    assert await controller.ask(Tick()) == 0
    assert backend.launches == []
    assert await queue_events(store, "q", "scale.decision") == []
    assert (await controller.ask(Status(NS))).ticks == 0


async def test_a_launch_that_cannot_be_applied_shows_as_the_units_error_and_is_retried(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    store: InMemoryStore,
) -> None:
    await backlog(spawn_queue, "q", 1, elasticity=ELASTIC)
    backend.refuse = Conflict("no room on this host")
    assert await controller.ask(Tick()) == 0
    assert (await unit(controller, "q")).error == "no room on this host"
    assert await queue_events(store, "q") == []  # nothing recorded for it
    backend.refuse = None
    assert await controller.ask(Tick()) == 1
    assert (await unit(controller, "q")).error is None
    assert len(backend.launched) == 1


async def test_a_tick_that_cannot_read_the_backlog_decides_nothing(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    bus: InMemoryBus,
) -> None:
    await backlog(spawn_queue, "q", 3, elasticity=ELASTIC)
    fail_once(bus, "queue_counts", Unavailable("nats did not answer"))
    assert await controller.ask(Tick()) == 0
    assert backend.launches == []
    assert (await controller.ask(Status(NS))).ticks == 0
    assert await controller.ask(Tick()) == 1  # and the next one, once it can, does


async def test_a_fixed_queue_is_never_scaled(
    controller: ActorRef[ControllerMsg], spawn_queue: SpawnQueue, backend: RecordingBackend
) -> None:
    await backlog(spawn_queue, "q", 5)
    assert await controller.ask(Tick()) == 0
    assert backend.launches == []
    q = await unit(controller, "q")
    assert (q.policy, q.desired) == ("fixed", 0)


async def test_an_idle_daemon_is_lent_to_a_starved_queue_through_its_heartbeat(
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    registry: ActorRef[WorkerMsg],
    store: InMemoryStore,
) -> None:
    stealing = Elasticity(steal_delay_s=0.0)
    await backlog(spawn_queue, "hot", 1, elasticity=stealing)
    await spawn_queue("cold")
    idle = await registry.ask(Register(WorkerRegister(namespace=NS, name="d1", queues=["cold"])))
    assert await controller.ask(Tick()) == 1
    [granted] = await queue_events(store, "hot", "steal_granted")
    assert granted.detail is not None and granted.detail["worker"] == idle.id
    hb = Heartbeat(worker_id=idle.id, namespace=NS, status=WorkerStatus.IDLE, ts=now())
    reply = await registry.ask(Beat(hb))
    assert [g.queue for g in reply.steal] == ["hot"]
    [lease] = (await controller.ask(Status(NS))).leases
    assert (lease.worker, lease.queue) == ("d1", "hot")


async def test_a_restarted_controller_counts_the_daemons_launched_before_as_launching(
    runtime: Runtime,
    controller: ActorRef[ControllerMsg],
    spawn_queue: SpawnQueue,
    backend: RecordingBackend,
    store: InMemoryStore,
    bus: InMemoryBus,
    registry: ActorRef[WorkerMsg],
    launcher: ActorRef[LauncherMsg],
) -> None:
    await backlog(spawn_queue, "q", 3, elasticity=ELASTIC)
    assert await controller.ask(Tick()) == 1
    await runtime.stop(controller)
    again = await runtime.spawn(
        ControllerActor(
            store=store, bus=bus, workers=registry, launcher=launcher, settings=ControllerSettings()
        )  # fmt: skip
    )
    assert await again.ask(Tick()) == 0  # the starting rows say what is in flight
    assert len(backend.launches) == 1
    assert (await unit(again, "q")).launching == 2
