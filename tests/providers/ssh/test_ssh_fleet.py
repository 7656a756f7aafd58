"""The controller's fleets on an ssh provider, and where its daemons are placed."""

from __future__ import annotations

import os
import signal

from polling import eventually
from ssh_fleet import GONE, NS, PROVIDER, UP, WAIT_S
from sshd import HOSTS, runs

from lakeshore.actors.launcher import StopDaemon
from lakeshore.model import WorkerStatus

H1, H2 = HOSTS


async def test_a_lost_ssh_daemon_is_replaced_over_ssh(fleet):
    await fleet.add_provider()
    await fleet.queue("el", kind="elastic", min=1, max=1, provider=PROVIDER)
    [victim] = await fleet.wait_managed("el", 1, placed=True)
    assert victim.provider == PROVIDER and victim.placement["host"] == H1
    os.kill(int(victim.placement["pid"]), signal.SIGKILL)

    [replaced] = await fleet.wait_events("el", "daemon_replaced")
    assert replaced.detail["lost"] == victim.id
    [now_up] = await eventually(
        lambda: fleet.managed("el"),
        until=lambda found: len(found) == 1 and found[0].id != victim.id and found[0].placement,
        timeout_s=WAIT_S,
        what="the replacement up",
    )
    assert now_up.id == replaced.detail["by"] and now_up.provider == PROVIDER
    assert runs(int(now_up.placement["pid"]), now_up.id)
    [lost] = await fleet.events("el", "daemon_lost")
    assert lost.detail["worker"] == victim.id
    ups = await fleet.wait_events("el", "scaled_up", 2)
    assert [i for e in ups for i in e.detail["ids"]] == [victim.id, now_up.id]
    assert all(e.detail["provider"] == PROVIDER for e in ups)


async def test_a_fully_elastic_queue_scales_from_zero_over_ssh_and_back(fleet):
    await fleet.add_provider()
    await fleet.queue(
        "fe",
        kind="fully_elastic",
        max=2,
        target_pending=1,
        scale_down_idle_s=0.5,
        provider=PROVIDER,
    )
    jobs = await fleet.hold("fe", 2)
    launched = await fleet.wait_managed("fe", 2, placed=True)
    pids = {w.id: int(w.placement["pid"]) for w in launched}
    assert all(runs(pid, wid) for wid, pid in pids.items())
    ups = await fleet.wait_events("fe", "scaled_up")
    assert sorted(i for e in ups for i in e.detail["ids"]) == sorted(pids)

    fleet.release()
    await fleet.wait_jobs(jobs)
    retired = await fleet.wait_managed("fe", 2, GONE, placed=True)
    assert {w.status for w in retired} == {WorkerStatus.STOPPED}
    downs = await fleet.wait_events("fe", "scaled_down", 2)
    assert {e.detail["worker"] for e in downs} == set(pids)
    await eventually(
        lambda: not any(runs(pid, wid) for wid, pid in pids.items()),
        timeout_s=WAIT_S,
        what="the retired daemons' processes to end",
    )


async def test_daemons_go_to_the_host_with_most_free_slots_until_none_is_left(fleet):
    # Each "host" logs in with its own HOME: ~/… is a different directory on each.
    await fleet.add_provider(hosts=[H1, H2], slots=2, log_dir="~/spread")
    ids = await fleet.launch("spread", count=5)
    placed = [await fleet.wait_worker(w, UP, placed=True) for w in ids[:4]]
    assert [w.placement["host"] for w in placed] == [H1, H2, H1, H2]
    for w in placed:
        home = fleet.sshd.homes[w.placement["host"]]
        assert (home / "spread" / NS / f"{w.id}.pid").read_text().strip() == w.placement["pid"]
    full = await fleet.wait_worker(ids[4], GONE)
    assert full.status is WorkerStatus.LOST and full.placement == {}
    [event] = await fleet.wait_events("default", "daemon_lost")
    assert event.detail["reason"] == (
        f"no free slot on hosts {H1}, {H2} (2 daemons each); raise slots or add hosts"
    )

    # A slot frees on H2: the next daemon goes there, though H1 is listed first.
    on_h2 = next(w for w in placed if w.placement["host"] == H2)
    await fleet.plane.parts.launcher.ask(StopDaemon(NS, on_h2.id))
    await fleet.wait_worker(on_h2.id, GONE)
    await eventually(
        lambda: not runs(int(on_h2.placement["pid"]), on_h2.id),
        timeout_s=WAIT_S,
        what="the stopped daemon's end",
    )
    [again] = await fleet.launch("refill")
    refill = await fleet.wait_worker(again, UP, placed=True)
    assert refill.placement["host"] == H2
