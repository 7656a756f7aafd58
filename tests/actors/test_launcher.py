"""Launcher: launches validated before any row exists, rows made by the registry, daemons
started by the provider's backend (a recording one here), exits reported back; stops and
provider rows."""

from __future__ import annotations

import pytest

from lakeshore.actors.base import ActorRef
from lakeshore.actors.launcher import (
    AddProvider,
    LaunchDaemons,
    LauncherMsg,
    RemoveProvider,
    StopDaemon,
)
from lakeshore.actors.workers import ListWorkers, Register, WorkerMsg
from lakeshore.errors import (
    AlreadyExists,
    Conflict,
    Invalid,
    InvalidName,
    LakeshoreError,
    NamespaceNotFound,
    NotFound,
    WorkerNotFound,
)
from lakeshore.model import (
    DEFAULT_QUEUE,
    DaemonLaunch,
    ProviderCreate,
    ProviderKind,
    WorkerRegister,
    WorkerStatus,
)
from lakeshore.store.memory import InMemoryStore

from .conftest import NATS_URL
from .support import NS, RecordingBackend, queue_events

STARTING, IDLE, LOST, STOPPED = (
    WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.LOST, WorkerStatus.STOPPED
)  # fmt: skip


def launch(name: str = "d", **request: object) -> LaunchDaemons:
    return LaunchDaemons(NS, DaemonLaunch(name=name, **request), actor="tok-1")


async def statuses(registry: ActorRef[WorkerMsg]) -> dict[str, WorkerStatus]:
    return {w.name: w.status for w in await registry.ask(ListWorkers(NS))}


async def test_a_launch_has_the_rows_made_then_the_backend_start_them(
    launcher: ActorRef[LauncherMsg],
    registry: ActorRef[WorkerMsg],
    backend: RecordingBackend,
    store: InMemoryStore,
) -> None:
    request = launch("gpu", count=2, queues=["a", "b", "a"], labels={"gpu": "1"})
    launched = await launcher.ask(request)
    names = [w.name for w in launched.workers]
    assert names == ["gpu-00", "gpu-01"]
    assert all(
        (w.status, w.queues, w.labels, w.provider, w.managed)
        == (STARTING, ["a", "b"], {"gpu": "1"}, "local", False)
        for w in launched.workers
    )
    assert backend.checked == ["local"]
    for w in launched.workers:  # each daemon is handed its own NATS access
        given = backend.access[w.id]
        assert (given.nats_url, given.worker_id) == (NATS_URL, w.id)
        assert given.credential == f"credential-of-{w.id}-in-default"
    assert backend.launches == [launched.workers]
    assert await registry.ask(ListWorkers(NS)) == launched.workers
    assert [w.name for w in await store.list_workers(NS)] == names
    for queue in ("a", "b"):
        [event] = await queue_events(store, queue)
        assert (event.type, event.actor) == ("daemons_launched", "tok-1")
        assert event.detail == {
            "provider": "local", "names": names, "ids": [w.id for w in launched.workers]
        }  # fmt: skip


async def test_one_daemon_keeps_its_name_and_pulls_from_the_default_queue(
    launcher: ActorRef[LauncherMsg], backend: RecordingBackend, store: InMemoryStore
) -> None:
    [w] = (await launcher.ask(launch("solo"))).workers
    assert (w.name, w.queues) == ("solo", [])
    assert [e.type for e in await queue_events(store, DEFAULT_QUEUE)] == ["daemons_launched"]
    assert backend.launched == [w]


async def test_the_controllers_launch_is_managed(
    launcher: ActorRef[LauncherMsg], backend: RecordingBackend
) -> None:
    msg = LaunchDaemons(NS, DaemonLaunch(name="m", count=1), managed=True)
    [w] = (await launcher.ask(msg)).workers
    assert w.managed and backend.launched[0].managed


async def test_a_launched_daemon_registering_turns_its_row_idle(
    launcher: ActorRef[LauncherMsg], registry: ActorRef[WorkerMsg]
) -> None:
    [w] = (await launcher.ask(launch("d", queues=["a"]))).workers
    reg = WorkerRegister(namespace=NS, name="d", id=w.id, queues=["a"], provider="local")
    await registry.ask(Register(reg))
    assert await statuses(registry) == {"d": IDLE}


@pytest.mark.parametrize(
    ("request_", "error", "says"),
    [
        ({"queues": [DEFAULT_QUEUE]}, Invalid, "'default' cannot be listed"),
        ({"queues": ["Bad Queue"]}, InvalidName, "invalid queue name"),
        ({"labels": {"a=b": "c"}}, Invalid, "invalid label key 'a=b'"),
        ({"labels": {"": "c"}}, Invalid, "invalid label key ''"),
        ({"provider": "nope"}, NotFound, "no provider 'nope' in namespace 'default'"),
        ({"name": "Bad_Name"}, InvalidName, "invalid worker name"),
    ],
)
async def test_a_bad_launch_is_refused_before_any_row_exists(
    launcher: ActorRef[LauncherMsg],
    registry: ActorRef[WorkerMsg],
    backend: RecordingBackend,
    store: InMemoryStore,
    request_: dict[str, object],
    error: type[LakeshoreError],
    says: str,
) -> None:
    fields = {"name": "d", **request_}
    with pytest.raises(error, match=says):
        await launcher.ask(LaunchDaemons(NS, DaemonLaunch(**fields)))  # type: ignore[arg-type]
    assert await registry.ask(ListWorkers()) == []
    assert backend.launches == []
    assert await store.list_workers() == []


async def test_launching_in_an_unknown_namespace_is_namespace_not_found(
    launcher: ActorRef[LauncherMsg], backend: RecordingBackend
) -> None:
    with pytest.raises(NamespaceNotFound) as refused:
        await launcher.ask(LaunchDaemons("nowhere", DaemonLaunch(name="d")))
    assert refused.value.http_status == 404
    assert backend.launches == []


async def test_a_backend_that_refuses_the_launch_leaves_no_row(
    launcher: ActorRef[LauncherMsg], registry: ActorRef[WorkerMsg], backend: RecordingBackend
) -> None:
    backend.refuse = Conflict("this host cannot run daemons")
    with pytest.raises(Conflict, match="this host cannot run daemons"):
        await launcher.ask(launch("d"))
    assert await registry.ask(ListWorkers()) == []
    assert backend.launches == []


async def test_an_external_provider_refuses_to_launch_and_says_how_to_start_one(
    launcher: ActorRef[LauncherMsg], registry: ActorRef[WorkerMsg], backend: RecordingBackend
) -> None:
    body = ProviderCreate(name="by-hand", kind=ProviderKind.EXTERNAL)
    await launcher.ask(AddProvider(NS, body))
    with pytest.raises(
        Conflict,
        match=r"`export LAKESHORE_TOKEN=<your token>`, then "
        r"`lakeshore daemon run --namespace default --provider",
    ):
        await launcher.ask(launch("d", provider="by-hand"))
    assert await registry.ask(ListWorkers()) == []
    assert backend.launches == []


async def test_a_stored_local_provider_launches_on_the_local_backend(
    launcher: ActorRef[LauncherMsg], backend: RecordingBackend
) -> None:
    await launcher.ask(AddProvider(NS, ProviderCreate(name="rack-2", kind=ProviderKind.LOCAL)))
    [w] = (await launcher.ask(launch("d", provider="rack-2"))).workers
    assert w.provider == "rack-2"
    assert backend.checked == ["rack-2"]


async def test_a_name_held_by_a_live_worker_refuses_the_whole_launch(
    launcher: ActorRef[LauncherMsg], registry: ActorRef[WorkerMsg], backend: RecordingBackend
) -> None:
    await registry.ask(Register(WorkerRegister(namespace=NS, name="d-01")))
    with pytest.raises(AlreadyExists, match="worker 'd-01' already exists"):
        await launcher.ask(launch("d", count=3))
    assert list(await statuses(registry)) == ["d-01"]
    assert backend.launches == []


async def test_a_daemon_whose_process_dies_is_lost_at_once(
    launcher: ActorRef[LauncherMsg],
    registry: ActorRef[WorkerMsg],
    backend: RecordingBackend,
    store: InMemoryStore,
) -> None:
    [a, b] = (await launcher.ask(launch("d", count=2, queues=["q"]))).workers
    backend.exit(a.id, 1, "exited with 1: ImportError")
    backend.exit(b.id, 0, "exited")
    # the exit is told to the registry; an ask is answered after it
    assert await statuses(registry) == {"d-00": LOST, "d-01": STOPPED}
    [event] = await queue_events(store, "q", "daemon_lost")
    assert event.detail is not None
    assert (event.detail["worker"], event.detail["exit_code"]) == (a.id, 1)


async def test_stop_forces_a_daemon_this_plane_started(
    launcher: ActorRef[LauncherMsg], registry: ActorRef[WorkerMsg], backend: RecordingBackend
) -> None:
    [w] = (await launcher.ask(launch("d"))).workers
    assert (await launcher.ask(StopDaemon(NS, "d"))).id == w.id  # by name or by id
    assert backend.stops == [w.id]
    assert await statuses(registry) == {"d": STOPPED}  # requested: stopped, not lost


async def test_stop_refuses_unknown_workers_and_those_no_backend_runs(
    launcher: ActorRef[LauncherMsg], registry: ActorRef[WorkerMsg], backend: RecordingBackend
) -> None:
    with pytest.raises(WorkerNotFound):
        await launcher.ask(StopDaemon(NS, "nobody"))
    hand = await registry.ask(Register(WorkerRegister(namespace=NS, name="hand")))
    with pytest.raises(Conflict, match="runs no process this control plane started") as refused:
        await launcher.ask(StopDaemon(NS, hand.id))
    assert refused.value.http_status == 409
    assert backend.stops == []


async def test_providers_are_added_and_removed(
    launcher: ActorRef[LauncherMsg], store: InMemoryStore
) -> None:
    body = ProviderCreate(name="rack-2", kind=ProviderKind.LOCAL, config={"slots": 4})
    row = await launcher.ask(AddProvider(NS, body))
    assert (row.name, row.kind, row.config) == ("rack-2", ProviderKind.LOCAL, {"slots": 4})
    assert await store.list_providers(NS) == [row]
    with pytest.raises(AlreadyExists, match="provider 'rack-2' already exists"):
        await launcher.ask(AddProvider(NS, body))
    assert await launcher.ask(RemoveProvider(NS, "rack-2")) == row
    assert await store.list_providers(NS) == []
    with pytest.raises(NotFound, match="no provider 'rack-2'"):
        await launcher.ask(RemoveProvider(NS, "rack-2"))


async def test_the_builtin_local_provider_cannot_be_added_or_removed(
    launcher: ActorRef[LauncherMsg], store: InMemoryStore
) -> None:
    body = ProviderCreate(name="local", kind=ProviderKind.EXTERNAL)
    with pytest.raises(AlreadyExists, match="in every namespace"):
        await launcher.ask(AddProvider(NS, body))
    with pytest.raises(Conflict, match="is built in"):
        await launcher.ask(RemoveProvider(NS, "local"))
    with pytest.raises(InvalidName):
        await launcher.ask(AddProvider(NS, ProviderCreate(name="No", kind=ProviderKind.LOCAL)))
    assert await store.list_providers(NS) == []
