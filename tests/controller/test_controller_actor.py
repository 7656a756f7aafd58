"""The ControllerActor with the local provider, for real: ``lakeshore daemon run`` processes
launched, replaced, lent and retired by the rule book, every tick (0.2 s here)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from fleet_waits import FleetWaits
from polling import eventually

from lakeshore.actors.workers import Beat
from lakeshore.cli.main import lakeshore
from lakeshore.controller import POOL_LABEL, QUEUE_LABEL, QueueLoad, Scope
from lakeshore.controller.status import pending_hint
from lakeshore.controller.tracking import Tracker
from lakeshore.model import (
    ControllerStatus,
    Elasticity,
    Heartbeat,
    ProviderKind,
    Queue,
    UnitStatus,
    Worker,
    WorkerStatus,
    now,
)
from lakeshore.sdk import Client

NS = "default"
BASE = f"/v1/namespaces/{NS}"
HERE = Path(__file__).parent
#: Bound of every wait that is not about a specific duration (seconds).
WAIT_S = 20.0
UP = frozenset({WorkerStatus.IDLE, WorkerStatus.BUSY})
GONE = frozenset({WorkerStatus.STOPPED, WorkerStatus.LOST})


class Bench(FleetWaits):
    """A control plane ticking every 0.2 s, its HTTP API, and a gate for held jobs."""

    def __init__(self, handle: Any, api: Any, gate: Path) -> None:
        self.handle, self.plane, self.api, self.gate = handle, handle.plane, api, gate

    async def queue(self, name: str, **elasticity: Any) -> None:
        status, body = await self.api.post(
            f"{BASE}/queues", {"name": name, "elasticity": elasticity}
        )
        assert status == 201, body

    async def post(self, path: str, body: Any = None) -> Any:
        status, answer = await self.api.post(BASE + path, body)
        assert status in (200, 201, 202), answer
        return answer

    async def submit(self, queue: str, fn: str, *args: Any, count: int = 1) -> list[str]:
        specs = [{"fn": f"scaling_jobs:{fn}", "args": list(args)}] * count
        return (await self.post(f"/queues/{queue}/invocations", {"invocations": specs}))["ids"]

    async def hold(self, queue: str, count: int) -> list[str]:
        """Submit ``count`` jobs that run until :meth:`release`."""
        return await self.submit(queue, "hold", str(self.gate), count=count)

    def release(self) -> None:
        self.gate.touch()

    async def hand_launch(self, name: str, queues: list[str], **labels: str) -> Worker:
        body = {"name": name, "queues": queues, "labels": labels}
        [row] = (await self.post("/daemons", body))["workers"]
        await self.until(lambda: self.worker_in(row["id"], UP))
        return next(w for w in await self.workers() if w.id == row["id"])

    async def worker_in(self, worker_id: str, statuses: frozenset[WorkerStatus]) -> bool:
        return any(w.id == worker_id and w.status in statuses for w in await self.workers())

    async def status(self) -> dict[str, Any]:
        status, body = await self.api.get(f"{BASE}/controller")
        assert status == 200, body
        return body

    async def unit(self, name: str, scope: str = "queue") -> dict[str, Any]:
        units = (await self.status())["units"]
        return next((u for u in units if (u["scope"], u["name"]) == (scope, name)), {})

    async def wait_unit(self, name: str, scope: str = "queue", **expected: Any) -> dict[str, Any]:
        """Wait until the status row shows ``expected`` (the status trails by a tick)."""
        return await eventually(
            lambda: self.unit(name, scope),
            until=lambda unit: unit and all(unit[k] == v for k, v in expected.items()),
            timeout_s=WAIT_S,
            every_s=0.05,
            what=f"{scope} unit {name} showing {expected}",
        )

    async def ticks(self, count: int) -> None:
        """Return once the controller has ticked ``count`` more times."""
        target = (await self.status())["ticks"] + count
        await self.until(lambda: self._ticked(target))

    async def _ticked(self, target: int) -> bool:
        return (await self.status())["ticks"] >= target

    async def job(self, job_id: str) -> dict[str, Any]:
        status, body = await self.api.get(f"{BASE}/jobs/{job_id}")
        assert status == 200, body
        return body

    async def until(self, cond: Callable[[], Awaitable[bool]], timeout_s: float = WAIT_S) -> None:
        await eventually(cond, timeout_s=timeout_s, every_s=0.05)


@pytest.fixture
async def bench(plane_factory, monkeypatch, tmp_path) -> AsyncIterator[Bench]:
    # The daemons the local provider starts inherit this environment: they import
    # ``scaling_jobs`` from here.
    paths = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    handle = await plane_factory(tick_s=0.2, heartbeat_s=0.2, lost_after_s=2)
    gate = tmp_path / "gate"
    async with handle.client() as api:
        try:
            yield Bench(handle, api, gate)
        finally:
            # Held jobs end, so the daemons drain at once when the plane stops.
            gate.touch()


def ts(raw: str) -> datetime:
    return datetime.fromisoformat(raw)


async def test_fully_elastic_scales_from_zero_to_the_backlog_and_back_to_zero(bench):
    await bench.queue("fe", kind="fully_elastic", max=3, target_pending=2, scale_down_idle_s=0.5)
    await bench.ticks(2)
    assert await bench.managed("fe", UP | {WorkerStatus.STARTING}) == []
    assert (await bench.unit("fe"))["desired"] == 0

    await bench.hold("fe", 6)
    launched = await bench.wait_managed("fe", 3)
    unit = await bench.wait_unit("fe", desired=3, actual=3)
    assert unit["policy"] == "fully_elastic 0..3"
    # One decision, unless a tick read the batch half-published (then the rest next tick).
    decisions = await bench.events("fe", "scale.decision")
    assert [d.detail["decision"] for d in decisions] == ["launch"] * len(decisions)
    assert sum(d.detail["count"] for d in decisions) == 3
    assert "→ desired 3" in decisions[-1].detail["reason"]
    ups = await bench.events("fe", "scaled_up")
    assert sorted(i for e in ups for i in e.detail["ids"]) == sorted(w.id for w in launched)

    bench.release()
    await bench.wait_managed("fe", 3, GONE)
    downs = await bench.wait_events("fe", "scaled_down", 3)
    assert {e.detail["worker"] for e in downs} == {w.id for w in launched}
    assert all(w.status is WorkerStatus.STOPPED for w in await bench.managed("fe", GONE))
    await bench.wait_unit("fe", desired=0, actual=0, launching=0)


async def test_elastic_keeps_min_replaces_a_sigkilled_daemon_and_stops_at_max(bench):
    await bench.queue("el", kind="elastic", min=2, max=3, target_pending=1)
    first = await bench.wait_managed("el", 2)
    victim = first[0]
    os.kill(bench.plane.parts.providers[ProviderKind.LOCAL].pid(victim.id), signal.SIGKILL)

    [replaced] = await bench.wait_events("el", "daemon_replaced")
    assert replaced.detail["lost"] == victim.id
    now_up = await bench.wait_managed("el", 2)
    assert victim.id not in {w.id for w in now_up}
    assert replaced.detail["by"] in {w.id for w in now_up}
    [lost] = await bench.events("el", "daemon_lost")
    assert lost.detail["worker"] == victim.id

    await bench.hold("el", 5)
    await bench.wait_managed("el", 3)
    unit = await bench.wait_unit("el", desired=3, actual=3)
    assert "max 3" in unit["reason"]
    await bench.ticks(5)
    assert len(await bench.managed("el", UP | {WorkerStatus.STARTING})) == 3


async def test_burst_adds_daemons_only_after_burst_after_s(bench):
    await bench.queue("bu", kind="burst", max=2, burst_after_s=1.0, target_pending=1)
    base = await bench.hand_launch("base", ["bu"])
    [first, *_] = await bench.hold("bu", 3)
    submitted = ts((await bench.job(first))["submitted_at"])

    extra = await bench.wait_managed("bu", 2)
    assert all((w.started_at - submitted).total_seconds() >= 1.0 for w in extra)
    decision, *_ = await bench.events("bu", "scale.decision")
    inputs = decision.detail["inputs"]
    assert inputs["oldest_pending_age_s"] >= 1.0 and inputs["hand"] == 1
    assert "bursting" in decision.detail["reason"]
    assert await bench.worker_in(base.id, UP)


async def test_a_draining_queue_keeps_its_daemons_until_empty_then_retires_them(bench):
    await bench.queue("dr", kind="elastic", min=1, max=2, target_pending=1)
    await bench.wait_managed("dr", 1)
    await bench.hold("dr", 2)
    daemons = await bench.wait_managed("dr", 2)
    await bench.post("/queues/dr/drain")
    await bench.ticks(5)
    assert len(await bench.managed("dr")) == 2
    assert await bench.events("dr", "scaled_down") == []

    bench.release()
    await bench.wait_managed("dr", 2, GONE)
    downs = await bench.wait_events("dr", "scaled_down", 2)
    assert {e.detail["worker"] for e in downs} == {w.id for w in daemons}
    assert all("draining and empty" in e.detail["reason"] for e in downs)


async def test_an_archived_queue_retires_its_managed_daemons(bench):
    await bench.queue("ar", kind="elastic", min=2, max=2)
    await bench.wait_managed("ar", 2)
    await bench.post("/queues/ar/archive")
    await bench.wait_managed("ar", 2, GONE)
    unit = await bench.wait_unit("ar", desired=0, actual=0)
    assert unit["reason"].startswith("archived")
    assert len(await bench.events("ar", "scaled_down")) == 2


async def test_a_pool_divides_its_cap_between_two_queues_by_cost_weight(bench):
    for name, weight in (("pa", 3.0), ("pb", 1.0)):
        await bench.queue(
            name, kind="fully_elastic", max=4, pool="mix", cost_weight=weight, target_pending=1
        )
    await bench.hold("pa", 4)
    pending = await bench.hold("pb", 4)

    a, b = await bench.wait_managed("pa", 3), await bench.wait_managed("pb", 1)
    for w in a + b:
        assert w.labels[POOL_LABEL] == "mix" and sorted(w.queues) == ["pa", "pb"]
    pool = await bench.wait_unit("mix", "pool", desired=4, actual=4)
    assert pool["policy"] == "pool max 4"
    assert "capped at pool max 4" in pool["reason"]
    assert [(await bench.unit(q))["desired"] for q in ("pa", "pb")] == [3, 1]

    async def at_max() -> bool:
        jobs = [await bench.job(i) for i in pending]
        return any(j.get("pending_reason") == "pool_at_max" for j in jobs)

    await bench.until(at_max)


async def test_an_idle_daemon_is_lent_after_steal_delay_s_and_never_before(bench):
    await bench.queue("victim", steal_delay_s=2.0, match={"tier": "cpu"})
    thief = await bench.hand_launch("thief", ["home"], tier="cpu")
    [job_id] = await bench.submit("victim", "noop")
    submitted = ts((await bench.job(job_id))["submitted_at"])

    async def waiting_for_delay() -> bool:
        return (await bench.job(job_id)).get("pending_reason") == "steal_delay"

    await bench.until(waiting_for_delay)
    assert (now() - submitted).total_seconds() < 2.0
    assert await bench.events("victim", "steal_granted") == []

    [grant] = await bench.wait_events("victim", "steal_granted")
    assert (grant.ts - submitted).total_seconds() >= 2.0
    assert (
        grant.detail["worker"] == thief.id and grant.detail["inputs"]["oldest_pending_age_s"] >= 2
    )
    [lease] = (await bench.status())["leases"]
    assert (lease["worker"], lease["queue"]) == ("thief", "victim")
    beat = Heartbeat(worker_id=thief.id, namespace=NS, status=WorkerStatus.IDLE, ts=now())
    reply = await bench.plane.parts.workers.ask(Beat(beat))
    assert [g.queue for g in reply.steal] == ["victim"]


async def test_a_leased_daemon_runs_the_stolen_work(bench):
    """Needs the daemon to honour ``HeartbeatReply.steal`` (pull the leased queue after
    its own until the lease's ``until``)."""
    await bench.queue("starved", steal_delay_s=0.5)
    thief = await bench.hand_launch("helper", ["home"])
    [job_id] = await bench.submit("starved", "noop")

    async def done() -> bool:
        return (await bench.job(job_id))["state"] == "succeeded"

    await bench.until(done, timeout_s=10.0)
    assert (await bench.job(job_id))["worker"] == thief.id


async def test_a_daemon_whose_labels_do_not_satisfy_match_never_steals(bench):
    await bench.queue("picky", steal_delay_s=0.2, match={"gpu": "h100"})
    await bench.hand_launch("cpu-only", ["elsewhere"], tier="cpu")
    [job_id] = await bench.submit("picky", "noop")
    await bench.ticks(10)
    assert await bench.events("picky", "steal_granted") == []
    assert (await bench.status())["leases"] == []
    job = await bench.job(job_id)
    assert (job["state"], job["pending_reason"]) == ("pending", "no_members")


async def test_status_route_sdk_and_cli_show_a_launch_in_flight(bench, monkeypatch, tmp_path):
    # A "daemon" that never registers: its launch stays in flight.
    local = bench.plane.parts.providers[ProviderKind.LOCAL]
    local.command = (sys.executable, "-c", "import signal; signal.pause()")
    await bench.queue("slow", kind="fully_elastic", max=2, target_pending=1)
    await bench.queue("still")
    [job_id] = await bench.submit("slow", "noop")

    async def scaling_up() -> bool:
        return (await bench.job(job_id)).get("pending_reason") == "scaling_up"

    await bench.until(scaling_up)
    await bench.ticks(5)
    assert len(await bench.managed("slow", frozenset({WorkerStatus.STARTING}))) == 1
    assert len(await bench.events("slow", "scaled_up")) == 1
    await bench.wait_unit("slow", desired=1, actual=0, launching=1)
    assert (await bench.unit("still"))["policy"] == "fixed"

    async with Client(bench.handle.api, bench.handle.admin_token) as client:
        typed = await client.controller_status()
    assert isinstance(typed, ControllerStatus) and typed.ticks > 0

    for var in ("LAKESHORE_NAMESPACE", "LAKESHORE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    env = {"LAKESHORE_API": bench.handle.api, "LAKESHORE_TOKEN": bench.handle.admin_token}

    async def cli(*args: str) -> str:
        runner = CliRunner(env=env)
        result = await asyncio.to_thread(
            runner.invoke, lakeshore, list(args), prog_name="lakeshore"
        )
        assert result.exit_code == 0, (result.output, result.exception)
        return result.stdout

    header, *rows = (await cli("controller", "status")).splitlines()
    assert header.split() == [
        "SCOPE", "NAME", "POLICY", "DESIRED", "ACTUAL", "LAUNCHING", "REASON"
    ]  # fmt: skip
    slow = next(r for r in rows if r.split()[:2] == ["queue", "slow"])
    assert slow.split()[2:7] == ["fully_elastic", "0..2", "1", "0", "1"]
    events = await cli("queues", "events", "slow", "--verbose")
    line = next(r for r in events.splitlines() if " scaled_up " in r)
    assert "→ launch 1" in line and "workers=[slow-" in line


async def test_status_counts_hand_launched_daemons_in_total_not_in_actual(bench):
    await bench.queue("by-hand")
    for name in ("hand-0", "hand-1"):
        await bench.hand_launch(name, ["by-hand"])
    unit = await bench.wait_unit("by-hand", total=2)
    assert (unit["desired"], unit["actual"], unit["launching"]) == (0, 0, 0)


async def test_elasticity_must_name_a_provider_the_controller_can_launch_on(bench):
    api = bench.api
    await bench.queue("q")
    status, body = await api.patch(f"{BASE}/queues/q", {"elasticity": {"provider": "nowhere"}})
    assert status == 400, body
    message = body["error"]["message"]
    assert "'nowhere' does not exist" in message
    assert "lakeshore providers add nowhere --kind local" in message
    status, body = await api.post(
        f"{BASE}/queues", {"name": "r", "elasticity": {"kind": "burst", "max": 1, "provider": "x"}}
    )
    assert (status, (await api.get(f"{BASE}/queues/r"))[0]) == (400, 404), body

    await bench.post("/providers", {"name": "by-hand", "kind": "external"})
    elastic = {"kind": "elastic", "max": 2, "provider": "by-hand"}
    status, body = await api.patch(f"{BASE}/queues/q", {"elasticity": elastic})
    assert status == 400 and "'by-hand' is external" in body["error"]["message"]
    status, _ = await api.patch(f"{BASE}/queues/q", {"elasticity": {"provider": "by-hand"}})
    assert status == 200

    await bench.post("/providers", {"name": "mine", "kind": "local"})
    scaling = {"kind": "fully_elastic", "max": 2, "provider": "mine"}
    status, body = await api.patch(f"{BASE}/queues/q", {"elasticity": scaling})
    assert status == 200 and body["elasticity"]["provider"] == "mine"


async def test_a_launch_that_cannot_be_applied_is_shown_and_retried_not_recorded(bench):
    await bench.post("/providers", {"name": "short-lived", "kind": "local"})
    await bench.queue("orphan", kind="fully_elastic", max=1, provider="short-lived")
    status, _ = await bench.api.delete(f"{BASE}/providers/short-lived")
    assert status == 200
    await bench.submit("orphan", "noop")

    unit = await bench.wait_unit("orphan", desired=1, actual=0, launching=0)
    assert "no provider 'short-lived'" in unit["error"]
    await bench.ticks(3)
    assert (await bench.unit("orphan"))["error"] == unit["error"]
    assert await bench.events("orphan", "scale.decision") == []
    assert await bench.managed("orphan", frozenset(WorkerStatus)) == []


def test_the_tracker_counts_starting_managed_rows_as_launching_and_watches_idleness():
    t0 = now()
    managed = {QUEUE_LABEL: "q"}
    starting = Worker(id="w-1", name="a", namespace=NS, labels=managed, managed=True, started_at=t0)
    idle = Worker(
        id="w-2", name="b", namespace=NS, labels=managed, managed=True, started_at=t0,
        status=WorkerStatus.IDLE,
    )  # fmt: skip
    tracker = Tracker()
    seen = tracker.observe([starting, idle], t0)
    assert [w.id for w in seen.workers] == ["w-2"] and seen.launching == {(NS, "q"): 1}
    assert seen.idle_since == {"w-2": t0}
    later = t0 + timedelta(seconds=5)
    lost = msgspec.structs.replace(idle, status=WorkerStatus.LOST)
    seen = tracker.observe([lost], later)
    assert seen.idle_since == {} and seen.newly_lost == {(NS, Scope.QUEUE, "q"): [lost]}
    assert tracker.observe([lost], later).newly_lost == {}


def test_pending_hint_prefers_scaling_up_then_pool_at_max_then_steal_delay():
    def row(scope: Scope, name: str, launching: int, actual: int, cap: int) -> UnitStatus:
        return UnitStatus(
            namespace=NS, scope=scope, name=name, policy="", max=cap, desired=cap,
            actual=actual, launching=launching, reason="",
        )  # fmt: skip

    t0 = now()
    q = Queue(
        name="q", namespace=NS, created_at=t0, updated_at=t0,
        elasticity=Elasticity(pool="p", steal_delay_s=5.0),
    )  # fmt: skip
    young = QueueLoad(namespace=NS, queue="q", pending=1, oldest_pending_age_s=1.0)
    key, pool = (NS, Scope.QUEUE, "q"), (NS, Scope.POOL, "p")
    assert pending_hint({key: row(Scope.QUEUE, "q", 1, 0, 2)}, q, young) == "scaling_up"
    assert pending_hint({pool: row(Scope.POOL, "p", 0, 2, 2)}, q, young) == "pool_at_max"
    assert pending_hint({pool: row(Scope.POOL, "p", 0, 1, 2)}, q, young) == "steal_delay"
    old = msgspec.structs.replace(young, oldest_pending_age_s=6.0)
    assert pending_hint({}, q, old) is None
