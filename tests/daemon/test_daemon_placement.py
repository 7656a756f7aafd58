"""Placement (spec/resources.md): a daemon runs only what fits what is free, each run gets an
exclusive device set (``CUDA_VISIBLE_DEVICES``, ``""`` for none), a request bigger than what
is free waits without being overtaken, and the worker row shows what is held.

The daemons' ``nvidia-smi`` is the stand-in printing real captured output of an 8 × H100
and an 8 × A100 host (tests/resources/captures), since these machines have no GPU.
"""

from __future__ import annotations

import logging
import os
import random
import re
from pathlib import Path
from typing import Any

from clirunner import cli_for
from daemon_support import J, Q, W, command, fn
from polling import eventually

from lakeshore.model import EventType

CAPTURES = Path(__file__).parents[1] / "resources"
H100 = "NVIDIA H100 80GB HBM3"
#: a run's line: when it started and ended, what it was granted
RECORD = (
    'echo "$LAKESHORE_JOB_ID start $(date +%s%N) [$CUDA_VISIBLE_DEVICES] [$LAKESHORE_GPUS] '
    '$CUDA_DEVICE_ORDER" >> "$0"; sleep "$1"; echo "$LAKESHORE_JOB_ID end $(date +%s%N)" >> "$0"'
)


def host(name: str) -> dict[str, str]:
    """The environment of a daemon on captured host ``name``."""
    path = f"{CAPTURES / 'bin'}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "FAKE_NVIDIA_SMI_HOST": str(CAPTURES / "captures" / name)}


def recorded(log: Path, seconds: float, **resources: Any) -> dict[str, Any]:
    spec = command("sh", "-c", RECORD, str(log), str(seconds))
    return {**spec, "resources": resources} if resources else spec


class Run:
    def __init__(self) -> None:
        self.start = self.end = 0
        self.devices: list[str] = []
        self.uuids: list[str] = []
        self.order = ""


def runs_of(log: Path) -> dict[str, Run]:
    runs: dict[str, Run] = {}
    for line in log.read_text().splitlines():
        job, what, ts, *rest = line.split()
        run = runs.setdefault(job, Run())
        if what == "start":
            run.start = int(ts)
            run.devices = [d for d in rest[0].strip("[]").split(",") if d]
            run.uuids = [u for u in rest[1].strip("[]").split(",") if u]
            run.order = rest[2] if len(rest) > 2 else ""
        else:
            run.end = int(ts)
    return runs


async def test_a_daemon_reports_its_gpus_and_what_its_runs_hold(
    api, bench, daemons, control_plane, tmp_path
) -> None:
    await bench.queue("train")
    d = await daemons.start("gpu-1", environ=host("h100x8"), queues=["train"], gpus="4",
                            concurrency=4, cpus=16, memory="64G")  # fmt: skip
    row = (await api.get(f"{W}/{d.id}"))[1]
    total = row["resources"]["total"]
    assert [g["index"] for g in total["gpus"]] == [0, 1, 2, 3]
    assert total["gpus"][0] == {"index": 0, "uuid": "GPU-f75045e8-4d87-49d1-2eb9-39ec2baddf9b",
                                "name": H100, "memory_mib": 81559}  # fmt: skip
    assert (total["cpus"], total["memory"]) == (16, 64 * 1024**3)
    gate = tmp_path / "go"
    wait = f'while [ ! -e "{gate}" ]; do sleep 0.02; done'
    [job] = await bench.submit(
        "train", command("sh", "-c", wait, resources={"gpus": 2, "cpus": 4, "memory": "16G"})
    )
    await bench.events.wait_count(EventType.STARTED, 1)

    async def row_now() -> dict[str, Any]:
        return (await api.get(f"{W}/{d.id}"))[1]

    held = await eventually(
        row_now,
        until=lambda r: r["running"] == [job],
        timeout_s=10,
        what="the worker row listing its run",
    )
    free = held["resources"]["free"]
    assert [g["index"] for g in free["gpus"]] == [2, 3]
    assert (free["cpus"], free["memory"]) == (12, 48 * 1024**3)
    cli = cli_for(control_plane)
    listing = (await cli("daemon", "list")).stdout
    assert f"2/4 {H100}" in listing, listing
    shown = (await cli("daemon", "show", "gpu-1")).stdout
    assert re.search(rf"resources:\s+4 GPUs {H100}, 16 CPUs, 64G memory", shown), shown
    assert re.search(r"free:\s+2 GPUs", shown) and "in use" in shown, shown
    gate.touch()
    assert await bench.events.wait_final(job) is EventType.SUCCEEDED
    await eventually(
        row_now,
        until=lambda r: r["running"] == [] and len(r["resources"]["free"]["gpus"]) == 4,
        timeout_s=10,
        what="the worker row with every GPU free again",
    )


async def test_500_random_requests_on_two_daemons_never_share_a_device(
    bench, daemons, tmp_path
) -> None:
    await bench.queue("mixed")
    for name, captured in (("h100", "h100x8"), ("a100", "a100x8")):
        await daemons.start(name, environ=host(captured), queues=["mixed"], gpus="4",
                            concurrency=4)  # fmt: skip
    log = tmp_path / "runs.log"
    rng = random.Random(25)
    asked: dict[str, tuple[int, str | None]] = {}
    for _ in range(5):
        specs = []
        for _ in range(100):
            gpus = rng.choice([0, 0, 1, 1, 2, 3, 4])
            kind = rng.choice([None, None, "H100", "A100"]) if gpus else None
            r = {"gpus": gpus, "gpu_type": kind} if kind else ({"gpus": gpus} if gpus else {})
            specs.append((recorded(log, 0.01, **r), (gpus, kind)))
        ids = await bench.submit("mixed", *(s for s, _ in specs))
        asked.update(zip(ids, (a for _, a in specs), strict=True))
    await bench.events.wait_count(EventType.SUCCEEDED, 500, timeout_s=240)
    listing = (CAPTURES / "captures/h100x8/nvidia-smi-L.txt").read_text()
    h100 = {w.strip(")") for w in listing.split() if w.startswith("GPU-")}
    runs = runs_of(log)
    assert set(runs) == set(asked)
    for job, run in runs.items():
        gpus, kind = asked[job]
        assert len(run.devices) == len(run.uuids) == gpus, (job, asked[job], run.__dict__)
        assert run.end >= run.start > 0
        if gpus:
            assert run.order == "PCI_BUS_ID"
            assert set(run.devices) <= {"0", "1", "2", "3"}
        if kind == "H100":
            assert set(run.uuids) <= h100
        if kind == "A100":
            assert not set(run.uuids) & h100
    by_start = sorted(runs.items(), key=lambda kv: kv[1].start)
    for i, (job, run) in enumerate(by_start):
        for other, later in by_start[i + 1 :]:
            if later.start > run.end:
                break
            shared = set(run.uuids) & set(later.uuids)
            assert not shared, f"{job} and {other} overlapped on {shared}"


async def test_a_large_request_is_not_overtaken_by_smaller_ones_behind_it(
    bench, daemons, tmp_path
) -> None:
    await bench.queue("train")
    await daemons.start("gpu-1", environ=host("h100x8"), queues=["train"], gpus="4",
                        concurrency=4)  # fmt: skip
    log = tmp_path / "runs.log"
    before = await bench.submit("train", *(recorded(log, 0.4, gpus=1) for _ in range(6)))
    [big] = await bench.submit("train", recorded(log, 0.1, gpus=4))
    after = await bench.submit("train", *(recorded(log, 0.1, gpus=1) for _ in range(6)))
    await bench.events.wait_count(EventType.SUCCEEDED, 13, timeout_s=60)
    runs = runs_of(log)
    assert len(runs[big].devices) == 4
    assert all(runs[j].start > runs[big].end for j in after), "a later 1-GPU run overtook"
    assert all(runs[j].end <= runs[big].start for j in before)
    # Its bound: it waited for the runs running when it was claimed, nothing else.
    [claimed] = [e for e in bench.events.of(EventType.CLAIMED) if e.invocation_id == big]
    started = runs[big].start / 1e9
    assert started - claimed.ts.timestamp() < 0.4 + 2.0


async def test_a_daemon_with_gpus_claims_one_at_a_time_and_hands_nothing_back(
    bench, daemons, tmp_path
) -> None:
    # Pulled in batches, a claim held for want of GPUs handed the rest of its batch back:
    # each a redelivery, which the next daemon checks with the control plane first.
    await bench.queue("mixed")
    log = tmp_path / "runs.log"
    rng = random.Random(39)
    asks = [rng.randint(0, 4) for _ in range(60)]
    ids = await bench.submit("mixed", *(recorded(log, 0.01, gpus=n) if n else recorded(log, 0.01)
                                         for n in asks))  # fmt: skip
    await daemons.start("gpu-1", environ=host("h100x8"), queues=["mixed"], gpus="4",
                        concurrency=4)  # fmt: skip
    await bench.events.wait_count(EventType.SUCCEEDED, len(ids), timeout_s=120)
    claims = [e for e in bench.events.of(EventType.STARTED) if e.invocation_id in set(ids)]
    assert sorted(e.invocation_id for e in claims) == sorted(ids)  # each claimed once
    assert {e.epoch for e in claims} == {1}  # no delivery handed back
    assert len(runs_of(log)) == len(ids)


async def test_runs_get_only_their_devices_and_no_gpu_run_sees_none(bench, daemons) -> None:
    await bench.queue("train")
    await daemons.start("gpu-1", environ=host("a100x8"), queues=["train"], gpus="1,3",
                        concurrency=2)  # fmt: skip
    one, none = await bench.submit(
        "train", {**fn("whoami"), "resources": {"gpus": 1, "gpu_type": "A100"}}, fn("whoami")
    )
    for job in (one, none):
        assert await bench.events.wait_final(job) is EventType.SUCCEEDED
    got = {job: (await bench.result(job, 1)).value for job in (one, none)}
    assert got[one]["devices"] in ("1", "3") and got[one]["order"] == "PCI_BUS_ID"
    assert got[one]["uuids"].startswith("GPU-")
    assert got[none]["devices"] == "" and got[none]["uuids"] == ""
    # (One worker may have run both: neither loaded CUDA. A worker CUDA pinned to its
    # devices runs no other's: tests/daemon/test_worker_wire.py.)


async def test_a_request_no_daemon_here_can_fit_is_handed_on_to_one_that_can(
    bench, daemons, tmp_path, caplog
) -> None:
    caplog.set_level(logging.INFO, "lakeshore.daemon.dispatcher")
    await bench.queue("train")
    await daemons.start("small", environ=host("a100x8"), queues=["train"], gpus="1")
    [job] = await bench.submit("train", recorded(tmp_path / "log", 0, gpus=2))
    said = f"{job}: handed back (needs 2 GPUs, 1 CPU; this daemon has 1 GPU NVIDIA A100"
    await eventually(lambda: caplog.text, until=lambda text: said in text, timeout_s=10,
                     what="the small daemon handing the claim back")  # fmt: skip
    await daemons.start("large", environ=host("h100x8"), queues=["train"], gpus="2")
    assert await bench.events.wait_final(job, timeout_s=30) is EventType.SUCCEEDED
    [started] = [e for e in bench.events.of(EventType.STARTED) if e.invocation_id == job]
    assert len(runs_of(tmp_path / "log")[job].devices) == 2
    assert started.worker == daemons.daemons[1].id


async def test_an_infeasible_request_says_no_daemon_fits_with_the_numbers(
    api, bench, daemons, control_plane
) -> None:
    await bench.queue("train")
    await daemons.start("gpu-1", environ=host("a100x8"), queues=["train"], gpus="2")
    status, body = await api.post(
        f"{Q}/train/invocations",
        {"command": ["true"], "resources": {"gpus": 4, "gpu_type": "H100"}},
    )
    assert status == 202, body
    said = (
        "no_daemon_fits: needs 4 GPUs H100, 1 CPU; the largest member, gpu-1, has 2 GPUs "
        "NVIDIA A100-SXM4-80GB"
    )
    assert len(body["warnings"]) == 1 and body["warnings"][0].startswith(said), body
    [job] = body["ids"]
    shown = (await api.get(f"{J}/{job}"))[1]
    assert shown["state"] == "pending" and shown["pending_reason"].startswith(said), shown
    listed = (await cli_for(control_plane)("jobs", "ls", "--queue", "train")).stdout
    assert "no_daemon_fits" in listed, listed
    # A request that fits warns of nothing.
    status, body = await api.post(
        f"{Q}/train/invocations", {"command": ["true"], "resources": {"gpus": 2}}
    )
    assert status == 202 and body.get("warnings", []) == [], body


async def test_a_request_that_fits_but_waits_says_waiting_for_resources(
    api, bench, daemons, tmp_path
) -> None:
    await bench.queue("train")
    # held for as long as the test looks (a claim held past hold_s is handed back: below)
    await daemons.start("gpu-1", environ=host("h100x8"), queues=["train"], gpus="2",
                        concurrency=2, hold_s=600)  # fmt: skip
    gate = tmp_path / "go"
    wait = command("sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.02; done')
    [first] = await bench.submit("train", {**wait, "resources": {"gpus": 1}})
    await bench.events.wait_count(EventType.STARTED, 1)
    [second] = await bench.submit("train", {**wait, "resources": {"gpus": 2}})

    async def reason() -> str | None:
        return (await api.get(f"{J}/{second}"))[1].get("pending_reason")

    said = await eventually(
        reason,
        until=lambda r: r is not None and r.startswith("waiting_for_resources"),
        timeout_s=10,
        what="the held job's reason",
    )
    assert said == (
        "waiting_for_resources: claimed by gpu-1, which starts it once 2 GPUs, 1 CPU are free "
        f"(1 GPU NVIDIA H100 80GB HBM3, 1 CPU, {said.split(', 1 CPU, ')[1].split(' ')[0]} "
        f"memory free now; running {first})"
    ), said
    gate.touch()
    for job in (first, second):
        assert await bench.events.wait_final(job) is EventType.SUCCEEDED


async def test_a_claim_held_past_hold_s_goes_to_a_daemon_with_room_and_waits_for_nothing_here(
    bench, daemons, tmp_path, caplog
) -> None:
    # Two daemons of 2 GPUs, two 2-GPU runs: the first daemon to pull took both and kept the
    # second until its first run ended, while the other daemon idled (a Slurm test saw it).
    caplog.set_level(logging.INFO, "lakeshore.daemon.dispatcher")
    await bench.queue("train")
    gpu_1 = await daemons.start("gpu-1", environ=host("h100x8"), queues=["train"], gpus="2",
                                concurrency=2, hold_s=0.3)  # fmt: skip
    gate = tmp_path / "go"
    wait = command("sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.02; done')
    [first] = await bench.submit("train", {**wait, "resources": {"gpus": 2}})
    await bench.events.wait_count(EventType.STARTED, 1)
    [second] = await bench.submit("train", recorded(tmp_path / "log", 0, gpus=2))
    said = f"{second}: handed back (held "
    await eventually(lambda: caplog.text, until=lambda text: said in text, timeout_s=10,
                     what="the held claim handed back")  # fmt: skip
    assert "2 GPUs, 1 CPU reserved here, nothing else claimed until they are free" in caplog.text
    # Reserved: gpu-1 claims nothing, not even what would fit what it has free (CPUs).
    [small] = await bench.submit("train", recorded(tmp_path / "log", 0))
    gpu_2 = await daemons.start("gpu-2", environ=host("h100x8"), queues=["train"], gpus="2",
                                concurrency=2)  # fmt: skip
    for job in (second, small):
        assert await bench.events.wait_final(job, timeout_s=30) is EventType.SUCCEEDED
    started = {e.invocation_id: e.worker for e in bench.events.of(EventType.STARTED)}
    assert started == {first: gpu_1.id, second: gpu_2.id, small: gpu_2.id}
    assert EventType.SUCCEEDED not in bench.events.for_id(first)  # it ran on gpu-1 meanwhile
    gate.touch()
    assert await bench.events.wait_final(first) is EventType.SUCCEEDED
