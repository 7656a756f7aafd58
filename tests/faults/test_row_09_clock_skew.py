"""Row 9 of the fault matrix: clock skew. Daemons whose wall clock is 10 minutes ahead or
behind (libfaketime), and a control plane whose wall clock jumps: no premature redelivery,
and the times the API shows are the server's.

libfaketime is a Debian package (``apt-get install faketime``, done by ``.ci/run``); without
it these tests fail, they do not skip. Only the wall clock is faked
(``DONT_FAKE_MONOTONIC=1``): a skewed or stepped clock does not move CLOCK_MONOTONIC.
"""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from polling import eventually
from report import record
from server_process import ServerProcess
from support import Api
from tally import NS, all_terminal, runs, tally, worker_ids

Q = f"{NS}/queues"
ACK_WAIT_S = 2.0
SKEW = {"ahead": "+10m", "behind": "-10m"}
SKEW_S = {"ahead": 600.0, "behind": -600.0}
LONG_S = 2.5 * ACK_WAIT_S
_SETTINGS = {"ack_wait_s": ACK_WAIT_S, "heartbeat_s": 0.2, "lost_after_s": 1.0}
LAKESHORE = str(Path(sys.executable).parent / "lakeshore")


@pytest.fixture(scope="module")
def libfaketime() -> Path:
    """The preload library of libfaketime: the one the ``libfaketime`` package (a dev
    dependency) builds, else Debian's; its absence fails the test."""
    import libfaketime as package

    paths = [Path(package.__file__).parent / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"]
    paths += sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    for path in paths:
        if path.is_file():
            return path
    pytest.fail("libfaketime is not installed: `pip install -e '.[dev]'` builds it")


def _faked(lib: Path, **env: str) -> dict[str, str]:
    return {"LD_PRELOAD": str(lib), "DONT_FAKE_MONOTONIC": "1", **env}


async def _start_skewed(handle, daemons_for, libfaketime, api):
    daemons = daemons_for(handle.plane.nats_url)
    for name, offset in SKEW.items():
        await api.post(Q, {"name": name})
        await daemons.start(name, name, concurrency=4, env=_faked(libfaketime, FAKETIME=offset))
    await eventually(
        lambda: worker_ids(api),
        until=lambda w: set(SKEW) <= set(w),
        timeout_s=30,
        what="the skewed daemons registered",
    )
    return daemons


async def _clock_of(api, queue: str) -> float:
    """The wall clock of ``queue``'s daemon minus ours, from a run of ``row_targets:clock``."""
    status, answer = await api.post(
        Q + f"/{queue}/invocations", {"fn": "row_targets:clock", "args": [-1]}
    )
    assert status == 202, answer
    before = time.time()
    status, result = await api.get(f"{NS}/jobs/{answer['ids'][0]}/result?wait_s=30")
    assert status == 200 and result["ok"], result
    return result["value"] - (before + time.time()) / 2


async def test_skewed_daemons_renew_their_claims_and_nothing_is_redelivered_early(
    plane_factory, daemons_for, libfaketime
):
    handle = await plane_factory(ack_wait_s=ACK_WAIT_S, heartbeat_s=0.2, lost_after_s=1)
    async with asyncio.timeout(90), handle.client() as api:
        daemons = await _start_skewed(handle, daemons_for, libfaketime, api)
        skew = {q: await _clock_of(api, q) for q in SKEW}
        for q, offset_s in SKEW_S.items():  # the fake clock is on, or this test proves nothing
            assert abs(skew[q] - offset_s) < 5, skew
        by_queue: dict[str, list[str]] = {}
        for q in SKEW:
            batch = [{"fn": "row_targets:timed", "args": [i, LONG_S]} for i in range(4)]
            status, answer = await api.post(Q + f"/{q}/invocations", {"invocations": batch})
            assert status == 202, answer
            by_queue[q] = answer["ids"]
        for q, queued in by_queue.items():
            await all_terminal(api, q, queued, timeout_s=40)
        ids = [i for queued in by_queue.values() for i in queued]
        counts = await tally(api, ids)
    assert counts.states == {"succeeded": len(ids)}, counts.odd()
    early = [i for i, b in counts.details.items() if [a["epoch"] for a in b["attempts"]] != [1]]
    assert not early, [counts.details[i]["attempts"] for i in early]
    assert len([r for r in runs(daemons.runs) if r[0] >= 0]) == len(ids)  # each ran once
    record(
        9,
        "skewed-daemons",
        tried=f"2 daemons at {SKEW['ahead']} and {SKEW['behind']} wall clock (libfaketime), "
        f"4 runs of {LONG_S:g}s each (ack_wait {ACK_WAIT_S:g}s)",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note=f"0 premature redeliveries; measured skew {skew['ahead']:+.0f}s / "
        f"{skew['behind']:+.0f}s",
    )


async def test_times_shown_for_skewed_daemons_are_the_servers(
    plane_factory, daemons_for, libfaketime
):
    handle = await plane_factory(ack_wait_s=ACK_WAIT_S, heartbeat_s=0.2, lost_after_s=1)
    problems: list[str] = []
    try:
        async with asyncio.timeout(60), handle.client() as api:
            await _start_skewed(handle, daemons_for, libfaketime, api)
            for q in SKEW:
                start = time.time()
                status, answer = await api.post(
                    Q + f"/{q}/invocations", {"fn": "row_targets:clock", "args": [0]}
                )
                assert status == 202
                status, _ = await api.get(f"{NS}/jobs/{answer['ids'][0]}/result?wait_s=30")
                assert status == 200
                shown = (await tally(api, answer["ids"])).details[answer["ids"][0]]
                for field in ("submitted_at", "started_at", "finished_at"):
                    at = datetime.fromisoformat(shown[field]).timestamp()
                    if not start - 1 <= at <= time.time() + 1:
                        problems.append(f"{q}: {field} {at - start:+.0f}s from the server's clock")
                status, stats = await api.get(f"{NS}/queues/{q}/stats")
                if stats["succeeded"] != 1:
                    problems.append(f"{q}: stats show {stats['succeeded']} succeeded, not 1")
            status, body = await api.get(f"{NS}/workers")
            for w in body["workers"]:
                beat = datetime.fromisoformat(w["last_heartbeat"]).timestamp()
                if abs(beat - time.time()) > 5:
                    problems.append(
                        f"worker {w['name']}: last_heartbeat {beat - time.time():+.0f}s"
                    )
                if w["status"] == "lost":
                    problems.append(f"worker {w['name']} shown lost while it heartbeats")
        assert not problems, problems
    except AssertionError:
        record(
            9,
            "times-shown",
            tried="times shown for the runs and heartbeats of daemons at ±10 min",
            passed=False,
            note="; ".join(problems),
        )
        raise
    record(
        9,
        "times-shown",
        tried="times shown for the runs and heartbeats of daemons at ±10 min",
        passed=True,
        note="submitted/started/finished within 1 s of the server's clock, last_heartbeat "
        "within 5 s, both runs counted by the stats, neither daemon shown lost",
    )


async def test_a_control_plane_clock_jump_redelivers_nothing_early(
    nats_server_factory, daemons_for, libfaketime, tmp_path
):
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    # The offset file is read again every second (FAKETIME_CACHE_DURATION), so the server's
    # wall clock steps when the file changes. Its NATS is a server of the test's own: under
    # libfaketime (DONT_FAKE_MONOTONIC) a timed subprocess wait, such as the embedded
    # server's version check, can fail with EINVAL.
    nats = await nats_server_factory(store_dir=tmp_path / "nats")
    server = ServerProcess(
        tmp_path / "data",
        {**_SETTINGS, "nats_url": nats.url},
        _faked(
            libfaketime,
            FAKETIME_TIMESTAMP_FILE=str(offset),
            FAKETIME_CACHE_DURATION="1",
        ),
    )
    await server.start()
    api = Api(server.api, server.token())
    statuses: list[int] = []
    try:
        async with asyncio.timeout(90):
            await api.post(Q, {"name": "work"})
            daemons = daemons_for(server.nats_url)
            await daemons.start("d0", "work", concurrency=4)
            batch = [{"fn": "row_targets:timed", "args": [i, LONG_S]} for i in range(4)]
            status, answer = await api.post(Q + "/work/invocations", {"invocations": batch})
            assert status == 202, answer
            ids = answer["ids"]
            await eventually(
                lambda: api.get(f"{NS}/queues/work/stats"),
                until=lambda r: r[1]["running"] == 4,
                timeout_s=30,
                what="4 runs in progress",
            )
            before = time.time()
            offset.write_text("+10m\n")

            async def jumped() -> float:
                status, body = await api.get(f"{NS}/jobs?queue=work&limit=10")
                statuses.append(status)
                # A queue's updated_at is stamped by the control plane's own clock.
                status, row = await api.patch(Q + "/work", {"description": f"{time.time()}"})
                statuses.append(status)
                return datetime.fromisoformat(row["updated_at"]).timestamp() - time.time()

            # The control plane's own times show the jump.
            await eventually(
                jumped,
                until=lambda d: d > 500,
                timeout_s=30,
                every_s=0.5,
                what="the server's clock 10 min ahead",
            )
            await all_terminal(api, "work", ids, timeout_s=40)
            offset.write_text("+0\n")
            counts = await tally(api, ids)
    finally:
        await api.close()
        await server.stop()
    assert counts.states == {"succeeded": len(ids)}, counts.odd()
    early = [i for i, b in counts.details.items() if [a["epoch"] for a in b["attempts"]] != [1]]
    assert not early, [counts.details[i]["attempts"] for i in early]
    assert not [s for s in statuses if s >= 500], statuses
    long_runs = [r for r in runs(daemons.runs) if r[0] >= 0]
    assert len(long_runs) == 4
    record(
        9,
        "control-plane-clock-jump",
        tried=f"lakeshore server's wall clock stepped +10 min (libfaketime) while 4 runs of "
        f"{LONG_S:g}s were in progress (ack_wait {ACK_WAIT_S:g}s); submits and reads meanwhile",
        passed=True,
        lost=counts.lost,
        double_recorded=counts.double_recorded,
        stale=counts.stale,
        note=f"0 premature redeliveries, 0 5xx; the jump seen {time.time() - before:.0f}s "
        "after it was made",
    )
