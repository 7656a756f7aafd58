"""The store derives the same fences and states from the history as the Recorder's memory."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakeshore.actors.recorder import _row
from lakeshore.fencing import Fence, fence_batch
from lakeshore.model import EventType, InvocationEvent
from lakeshore.store import open_store

T0 = datetime(2025, 1, 2, tzinfo=UTC)
PROTOCOL = [EventType.CLAIMED, EventType.STARTED]
ENDINGS = [EventType.SUCCEEDED, EventType.FAILED, EventType.RETRYING, EventType.CANCELLED, None]


def _history(rng: random.Random, inv: str) -> list[InvocationEvent]:
    """A plausible history: submit, a few attempts, late zombies, completions forged by
    another daemon (``wx``) and control-plane ends. One in four has no ``submitted`` event:
    its claims carry the submission's record instead (lakeshore/submission.py)."""
    carried = rng.random() < 0.25
    out: list[tuple[EventType, int | None, str | None]] = (
        [] if carried else [(EventType.SUBMITTED, None, None)]
    )
    for epoch in range(1, rng.randint(1, 4)):
        out += [(t, epoch, f"w{epoch}") for t in PROTOCOL[: rng.randint(0, 2)]]
        if (end := rng.choice(ENDINGS)) is not None:
            out.append((end, epoch, "wx" if rng.random() < 0.2 else f"w{epoch}"))
    if rng.random() < 0.2:
        out.append((rng.choice([EventType.CANCELLED, EventType.DROPPED]), None, None))
    return [
        InvocationEvent(
            namespace="ns",
            queue="a",
            invocation_id=inv,
            ts=T0 + timedelta(seconds=i),
            type=t,
            attempt=e or 0,
            epoch=e,
            worker=w,
            detail={"submission": {"seq": 1}} if carried and t in PROTOCOL else None,
        )
        for i, (t, e, w) in enumerate(out)
    ]


async def test_store_fences_and_states_match_the_recorders_memory(tmp_path: Path) -> None:
    rng = random.Random(7)
    events = [e for i in range(300) for e in _history(rng, f"inv-{i:03}")]
    # Arrival order differs from protocol order: shuffle in small windows.
    for start in range(0, len(events), 5):
        window = events[start : start + 5]
        rng.shuffle(window)
        events[start : start + 5] = window
    known: dict[tuple[str, str], Fence] = {}
    stale = 0
    reasons: set[str] = set()
    async with await open_store(tmp_path / "s.duckdb") as store:
        for start in range(0, len(events), 97):
            fenced = fence_batch(events[start : start + 97], known)
            known.update(fenced.fences)
            stale += fenced.stale
            reasons |= {
                e.detail["stale_reason"].split()[0] for e in fenced.events if e.type == "stale"
            }
            await store.append_invocation_events([_row(e) for e in fenced.events])
        ids = sorted({k[1] for k in known})
        assert await store.fences(ids) == known
        unfinished = {k: f for k, f in known.items() if not f.finished}
        assert await store.unfinished_fences() == unfinished
        jobs = await store.list_jobs("ns", limit=1000)
        assert {("ns", j.id): j.state for j in jobs} == {k: f.state for k, f in known.items()}
        assert {f.state for f in known.values()} >= {"pending", "running", "succeeded", "failed"}
        assert stale > 0
        assert reasons == {"already", "epoch", "attempt"}, "finished, superseded, not claimant"
        made = {f.submitted for f in known.values()}
        assert made == {True, False}, "records made from claims, and invocations without any"
