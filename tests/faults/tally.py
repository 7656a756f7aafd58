"""Counting what a fault did, through the API: lost, double-recorded and stale invocations,
and which daemon process ran what (the ``fault_targets`` run logs)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polling import eventually

NS = "/v1/namespaces/default"
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "dropped"})


@dataclass
class Tally:
    """The figures of one case, counted over the 2xx-admitted invocations."""

    #: admitted, but not in a terminal state the API shows
    lost: int = 0
    #: more than one accepted completion
    double_recorded: int = 0
    #: stale events recorded
    stale: int = 0
    #: state → how many
    states: Counter[str] = field(default_factory=Counter)
    #: every job's detail, by id
    details: dict[str, dict[str, Any]] = field(default_factory=dict)

    def odd(self, limit: int = 5) -> list[tuple[str, str, Any, list]]:
        """The first jobs that did not succeed: id, state, error and attempts (for asserts)."""
        out = [
            (i, b["state"], b.get("error"), b["attempts"])
            for i, b in self.details.items()
            if b["state"] != "succeeded"
        ]
        return out[:limit]


async def job(api, inv_id: str) -> dict[str, Any]:
    status, body = await api.get(f"{NS}/jobs/{inv_id}")
    assert status == 200, (status, body)
    return body


async def details(api, ids: Iterable[str], window: int = 32) -> dict[str, dict[str, Any]]:
    """Every job's detail (with its attempts), fetched ``window`` at a time."""
    ids = list(ids)
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), window):
        part = ids[start : start + window]
        bodies = await asyncio.gather(*(job(api, i) for i in part))
        for inv_id, body in zip(part, bodies, strict=True):
            out[inv_id] = body
    return out


async def tally(api, ids: Iterable[str]) -> Tally:
    t = Tally(details=await details(api, ids))
    for body in t.details.values():
        t.states[body["state"]] += 1
        t.lost += body["state"] not in TERMINAL
        accepted = sum(a["outcome"] in ("succeeded", "failed") for a in body["attempts"])
        t.double_recorded += accepted > 1
        t.stale += body["stale"]
    return t


async def all_finished(api, queue: str, n: int, timeout_s: float, every_s: float = 0.2) -> None:
    """Wait until ``queue``'s stats show ``n`` finished (succeeded or failed: the caller's
    tally says which) and nothing pending or running. A stats call that fails (NATS busy)
    counts as not yet."""

    async def stats() -> dict:
        status, body = await api.get(f"{NS}/queues/{queue}/stats")
        return body if status == 200 else {}

    def done(s: dict) -> bool:
        finished = s.get("succeeded", 0) + s.get("failed", 0)
        return bool(s) and finished >= n and s["pending"] == 0 and s["running"] == 0

    await eventually(
        stats,
        until=done,
        timeout_s=timeout_s,
        every_s=every_s,
        what=f"{n} finished and none pending or running in queue {queue}",
    )


async def all_terminal(api, queue: str, ids: Iterable[str], timeout_s: float) -> None:
    """Wait until every one of ``ids`` is in a terminal state (read from the jobs list, not
    from the stats, whose window is the server's clock)."""
    wanted = set(ids)

    async def unfinished() -> set[str]:
        status, body = await api.get(f"{NS}/jobs?queue={queue}&limit=1000")
        assert status == 200, body
        done = {j["id"] for j in body["jobs"] if j["state"] in TERMINAL}
        return wanted - done

    await eventually(
        unfinished,
        until=lambda left: not left,
        timeout_s=timeout_s,
        every_s=0.2,
        what=f"{len(wanted)} invocations of {queue} finished",
    )


async def worker_ids(api) -> dict[str, str]:
    """Worker name → id."""
    status, body = await api.get(f"{NS}/workers")
    assert status == 200, body
    return {w["name"]: w["id"] for w in body["workers"]}


def runs(*files: Path) -> list[tuple[int, int]]:
    """``(i, pid)`` per execution logged by ``fault_targets.work`` in these run logs."""
    out: list[tuple[int, int]] = []
    for path in files:
        if path.exists():
            for line in path.read_text().splitlines():
                i, pid = line.split()[:2]
                out.append((int(i), int(pid)))
    return out
