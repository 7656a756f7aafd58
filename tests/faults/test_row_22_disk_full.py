"""Row 22 of the fault matrix: the disk under the NATS store or under the DuckDB file is
full. Submits fail 503/507 with the reason, nothing is half-written, and everything works
again by itself within 10 s of space coming back.

The disks are small tmpfs mounts (the suite runs as root; without mount rights this row
fails, it does not skip). nats-server limits JetStream to 75 % of the disk it finds at
start, so a store filled by JetStream itself is refused by JetStream ("insufficient
resources", err_code 10023, before the disk is full); a disk filled by something else
makes its writes fail with ENOSPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.js.errors
import pytest
from nats.js.api import StreamConfig
from natsauth import plane_nats
from polling import eventually
from report import record
from tally import NS, all_finished, worker_ids

Q = f"{NS}/queues"
STREAM = "LS_default_work"
RECOVER_S = 10.0


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"row 22 needs to mount a tmpfs (root with mount rights): {done.stderr}")
    try:
        yield path
    finally:
        # Lazy: a process that still has files open there (a server stopped later) keeps them.
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 16 MiB tmpfs, unmounted after the servers on it stop (request it first)."""
    with _tmpfs(tmp_path / "disk", "16m") as path:
        yield path


def _fill(path: Path) -> Path:
    """Fill the disk under ``path`` with a file; returns the file (remove it to free the space)."""
    filler = path / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    return filler


async def _fill_jetstream(js) -> None:
    """Fill JetStream's store with a stream that is not Lakeshore's, until it refuses."""
    await js.add_stream(StreamConfig(name="FILLER", subjects=["filler.>"]))
    with contextlib.suppress(nats.js.errors.ServiceUnavailableError):
        for _ in range(100):
            await js.publish("filler.x", b"\0" * 900_000)
    with pytest.raises(nats.js.errors.ServiceUnavailableError):
        await js.publish("filler.x", b"\0" * 900_000)


def _inv(key: str, **extra) -> dict:
    return {"fn": "fault_targets:work", "args": [0], "idempotency_key": key, **extra}


async def _jobs(api) -> list[dict]:
    status, body = await api.get(f"{NS}/jobs?queue=work&limit=1000")
    assert status == 200, body
    return body["jobs"]


async def test_a_full_jetstream_store_refuses_submits_with_507_and_recovers(
    small_disk, nats_server_factory, plane_factory
):
    server = await nats_server_factory(store_dir=small_disk / "nats")
    handle = await plane_factory(nats_url=server.url)
    nc = await plane_nats(server.url)
    try:
        async with asyncio.timeout(60), handle.client() as api:
            js = nc.jetstream(timeout=5)
            assert (await api.post(Q, {"name": "work"}))[0] == 201
            await _fill_jetstream(js)
            start = time.monotonic()
            refused = [
                await api.post(Q + "/work/invocations", _inv("k1")),
                await api.post(Q + "/work/invocations", {"fn": "fault_targets:work", "args": [1]}),
            ]
            refuse_s = time.monotonic() - start
            stored = (await js.stream_info(STREAM)).state.messages
            shown = await _jobs(api)
            await js.delete_stream("FILLER")
            freed = time.monotonic()
            status, answer = await eventually(
                lambda: api.post(Q + "/work/invocations", _inv("k1")),
                until=lambda r: r[0] == 202,
                timeout_s=RECOVER_S,
                every_s=0.2,
                what="a submit accepted after space came back",
            )
            recover_s = time.monotonic() - freed
            after = (await js.stream_info(STREAM)).state.messages
    finally:
        await nc.close()
    for status, body in refused:
        assert (status, body["error"]["code"]) == (507, "insufficient_storage"), body
        assert "insufficient resources" in body["error"]["message"], body
    assert stored == 0 and shown == []  # nothing half-written
    assert after == 1 and len(answer["ids"]) == 1
    record(
        22,
        "jetstream-store-full",
        tried="JetStream's store (a 16 MiB tmpfs) filled by another stream until JetStream "
        "refused; a keyed and an unkeyed submit; the other stream deleted; the keyed retried",
        passed=True,
        note=f"both refused 507 insufficient_storage in {refuse_s:.2f}s; nothing stored or "
        f"shown; accepted again {recover_s:.2f}s after the space came back",
    )


async def test_a_queue_that_fills_the_store_itself_leaves_nothing_half_written(
    small_disk, nats_server_factory, plane_factory, daemons_for
):
    server = await nats_server_factory(store_dir=small_disk / "nats")
    handle = await plane_factory(nats_url=server.url)
    nc = await plane_nats(server.url)
    big = "x" * 600_000
    accepted: list[str] = []
    try:
        async with asyncio.timeout(60), handle.client() as api:
            js = nc.jetstream(timeout=5)
            assert (await api.post(Q, {"name": "work"}))[0] == 201
            for k in range(100):
                body = _inv(f"b{k}", fn="row_targets:padded", args=[k], kwargs={"pad": big})
                status, answer = await api.post(Q + "/work/invocations", body)
                if status != 202:
                    break
                accepted += answer["ids"]
            refused = (status, answer)
            stored = (await js.stream_info(STREAM)).state.messages
            shown = {j["id"] for j in await _jobs(api)}
            # Space returns as a daemon works the backlog off; the refused key is retried.
            daemons = daemons_for(server.url)
            await daemons.start("d0", "work", concurrency=4)
            await all_finished(api, "work", len(accepted), timeout_s=30)
            freed = time.monotonic()
            retried = await eventually(
                lambda: api.post(Q + "/work/invocations", body),
                until=lambda r: r[0] == 202,
                timeout_s=RECOVER_S,
                every_s=0.2,
                what="the refused submit accepted once space came back",
            )
            recover_s = time.monotonic() - freed
            await all_finished(api, "work", len(accepted) + 1, timeout_s=30)
            ran = sorted(int(line.split()[0]) for line in daemons.runs.read_text().splitlines())
    finally:
        await nc.close()
    assert refused[0] == 507 and refused[1]["error"]["code"] == "insufficient_storage", refused
    assert stored == len(accepted), f"{stored} stored, {len(accepted)} accepted"
    assert shown == set(accepted)
    assert ran == list(range(len(accepted) + 1))  # each once, the retried one too
    record(
        22,
        "queue-fills-jetstream",
        tried="invocations of 600 kB submitted one by one until JetStream's store (a 16 MiB "
        "tmpfs) refused; a daemon then ran the backlog off and the refused key was retried",
        passed=True,
        note=f"{len(accepted)} accepted, then 507 insufficient_storage; {stored} in the "
        f"stream, {len(shown)} shown (nothing half-written); the retry accepted "
        f"{recover_s:.2f}s after the backlog was run (id {retried[1]['ids'][0][-6:]}), "
        "every invocation ran once",
    )


_STICKY = (
    "when a write under the NATS store fails with ENOSPC (the disk filled by something "
    "else), nats-server 2.14 keeps the stream's write error until it restarts: every "
    "publish to it times out, so the submit answers 503 after 5 s with no reason ('could "
    "not publish … TimeoutError'), and it never recovers when space comes back; Lakeshore "
    "neither names the cause nor recovers the stream (lakeshore/bus/nats.py publish_work "
    "gets no error code to map)"
)


async def _recovers(api, key: str) -> float | None:
    """Seconds until a submit of ``key`` is accepted again, or ``None`` after RECOVER_S."""
    freed = time.monotonic()
    try:
        await eventually(
            lambda: api.post(Q + "/work/invocations", _inv(key)),
            until=lambda r: r[0] == 202,
            timeout_s=RECOVER_S,
            every_s=0.5,
            what="a submit accepted after space came back",
        )
    except AssertionError:
        return None
    return time.monotonic() - freed


def _named(status: int, body: dict) -> bool:
    message = (body.get("error") or {}).get("message", "")
    return status in (503, 507) and any(w in message for w in ("space", "storage", "full"))


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=_STICKY)
async def test_a_disk_filled_by_others_under_nats_is_named_and_recovered(
    small_disk, nats_server_factory, plane_factory
):
    server = await nats_server_factory(store_dir=small_disk / "nats")
    handle = await plane_factory(nats_url=server.url)
    async with asyncio.timeout(60), handle.client() as api:
        assert (await api.post(Q, {"name": "work"}))[0] == 201
        filler = _fill(small_disk)
        start = time.monotonic()
        status, body = await api.post(Q + "/work/invocations", _inv("d1"))
        took = time.monotonic() - start
        os.remove(filler)
        recover_s = await _recovers(api, "d1")
    passed = _named(status, body) and took <= 5 and recover_s is not None
    record(
        22,
        "disk-full-under-nats",
        tried="the disk under the NATS store (a 16 MiB tmpfs) filled by a file; a submit; "
        "the file removed; the submit retried",
        passed=passed,
        note=f"answered {status} after {took:.1f}s ({body['error']['message'][:120]}); "
        + ("not accepted again" if recover_s is None else f"accepted again {recover_s:.1f}s")
        + f" after space came back (bound {RECOVER_S:g}s)"
        + ("" if passed else f" — xfail: {_STICKY}"),
    )
    assert passed


async def test_a_full_disk_under_duckdb_refuses_with_the_reason_and_recovers(
    small_disk, plane_factory, daemons_for
):
    handle = await plane_factory(data_dir=small_disk / "plane")
    daemons = daemons_for(handle.plane.nats_url)
    async with asyncio.timeout(90), handle.client() as api:
        assert (await api.post(Q, {"name": "work"}))[0] == 201
        await daemons.start("d0", "work", concurrency=4)
        await eventually(
            lambda: worker_ids(api),
            until=lambda w: "d0" in w,
            timeout_s=30,
            what="the daemon registered",
        )
        filler = _fill(small_disk)
        answers = []
        for k in range(40):
            answers.append(await api.post(Q + "/work/invocations", _inv(f"k{k}")))
            plain = {"fn": "fault_targets:work", "args": [k]}
            answers.append(await api.post(Q + "/work/invocations", plain))
        os.remove(filler)
        recover_s = await _recovers(api, "k0")
        # Everything admitted, and the refused keys retried, ends recorded.
        retried = [await api.post(Q + "/work/invocations", _inv(f"k{k}")) for k in range(40)]
        ids = {i for status, body in answers + retried if status == 202 for i in body["ids"]}
        await eventually(
            lambda: _jobs(api),
            timeout_s=30,
            every_s=0.2,
            until=lambda js: {j["id"] for j in js if j["state"] == "succeeded"} >= ids,
            what="every admitted invocation recorded succeeded",
        )
        jobs = await _jobs(api)
    statuses = sorted({status for status, _ in answers})
    unnamed = [
        body["error"] for status, body in answers if status != 202 and not _named(status, body)
    ]
    passed = not unnamed and recover_s is not None and len(jobs) == len(ids)
    record(
        22,
        "disk-full-under-duckdb",
        tried="the disk under DuckDB (a 16 MiB tmpfs) filled by a file; 40 keyed and 40 "
        "keyless submits with a daemon running them; the file removed; the keys retried",
        passed=passed,
        note=f"answers {statuses} while full ({len(unnamed)} without the reason, e.g. "
        f"{unnamed[0] if unnamed else '-'}); "
        + ("not accepted again" if recover_s is None else f"accepted again {recover_s:.1f}s")
        + f" after space came back; {len(ids)} admitted, all recorded once"
        + ("" if passed else " — failed"),
    )
    assert not unnamed, unnamed[:3]
    assert recover_s is not None and recover_s <= RECOVER_S
