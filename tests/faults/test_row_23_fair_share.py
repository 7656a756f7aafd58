"""Row 23 of the fault matrix: one org (B) floods a shared control plane with pending work
and 1,500 concurrent result waits (500 over HTTP, 1,000 over NATS); another org (A) must not
feel it. Two cases of one run: A gets no 5xx, every request of A's is answered, none of its
daemons is lost, and B's waits past its quotas are refused with 429 (passes); A's p99 for
``GET …/workers``, ``GET …/queues/<q>`` and its daemons' heartbeats stays within
:data:`RATIO` × its idle p99 measured in the same run (an expected failure: see
:data:`_SHARED_LOOP`).

The scenario is ``bench/fair_share.py``'s (one implementation: the bench's figures and this
row's are the same measurement), on a ``lakeshore server`` of its own (``server_proc.py``),
at a reduced scale to keep the row near a minute: :data:`PENDING` pending instead of 100k
and shorter windows; the 1,500 waits are kept whole, since they are what the quotas bound.
"""

from __future__ import annotations

import asyncio
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from report import record
from server_proc import ServerProc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import fair_share  # noqa: E402

#: B's pending invocations (the bench's default is 100k).
PENDING = 20_000
HTTP_WAITS, NATS_WAITS = 500, 1_000
#: Each measurement window (seconds): idle, then after B's last submit.
WINDOW_S = 8
#: B's waits' ``wait_s``: each wait ends (and is opened again) within the attack window.
WAIT_S = 4
#: A's p99 under attack over its idle p99, at most (the issue's target).
RATIO = 2.0

_SHARED_LOOP = (
    "B's traffic still shares the control plane's one event loop with A's requests and "
    "heartbeats: B's reads no longer queue on the store's thread (FairReads, Ranks), "
    "heartbeats no longer wait on store writes, B's batches are prepared and published in "
    "turns (actors/turns.py) and the collector no longer stops the loop for 100-150 ms many "
    "times a minute (collector.py), but every request of B's (hundreds of refused waits a "
    "second, 5,000-invocation submits) still takes loop time that A's requests wait behind: "
    "on a 2-core host A's p99 rises from a few ms to ~100 (20-40x, not 2x). Meeting 2x needs "
    "B's submits off the plane (issue 26's data path) and the heartbeat and controller paths "
    "on a loop or process of their own"
)


@dataclass
class _Plane:
    """The bench's view of a server: its API, admin token and NATS URL."""

    api: str
    token: str
    nats_url: str


@pytest.fixture(scope="module")
def attacked(tmp_path_factory) -> fair_share.Outcome:
    """One run of the attack for the row's cases (it is their common, minute-long part)."""
    tmp = tmp_path_factory.mktemp("row23")
    args = fair_share.options([
        "--pending", str(PENDING), "--http-waits", str(HTTP_WAITS),
        "--nats-waits", str(NATS_WAITS), "--window-s", str(WINDOW_S), "--wait-s", str(WAIT_S),
    ])  # fmt: skip

    async def run() -> fair_share.Outcome:
        server = ServerProc(tmp / "data")
        await server.start()
        try:
            async with asyncio.timeout(200):
                plane = _Plane(server.api, server.token, server.nats_url)
                return await fair_share.run_attack(plane, args, tmp)
        finally:
            await server.stop()

    outcome = asyncio.run(run())
    fair_share.report(outcome, args)  # shown with -s, and in a failure's captured output
    return outcome


def _tried() -> str:
    return (
        f"org B: {PENDING:,} pending + {HTTP_WAITS} HTTP and {NATS_WAITS} NATS result waits "
        f"(wait_s {WAIT_S}); org A: GET workers and GET queue at 20/s each, 4 simulated and 2 "
        f"real daemons heartbeating; A measured idle, then under attack ({WINDOW_S}s windows)"
    )


def _figures(outcome: fair_share.Outcome) -> str:
    return "; ".join(
        f"{kind} {outcome.idle.samples[kind].p(99):.0f} → "
        f"{outcome.attack.samples[kind].p(99):.0f} ms ({outcome.ratio(kind):.0f}x)"
        for kind in fair_share.KINDS
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_flooding_org_is_refused_past_its_quotas_and_the_other_org_gets_no_error(
    attacked: fair_share.Outcome,
):
    o = attacked
    assert o.five_xx() == 0
    assert o.unanswered() == 0
    assert not o.lost, o.lost
    assert o.b["submitted"] == PENDING
    assert o.refused() > 0, o.b["waits"]
    assert not o.b["failures"], o.b["failures"]
    record(
        23,
        "no-error-to-the-other-org",
        tried=_tried(),
        passed=True,
        errors_5xx=o.five_xx(),
        note=f"scaled down ({PENDING:,} pending, not 100k); 0 5xx and 0 unanswered (10 s "
        f"bound) of A's {sum(len(s.sent) for s in o.attack.samples.values()):,} requests "
        f"under attack, none of A's daemons lost; B's waits refused (429 quota_exceeded) "
        f"{o.refused():,} times, none failed otherwise",
    )


@pytest.mark.slow
@pytest.mark.timeout(60)
# Not strict: on a loaded machine the idle p99 itself is slow, and the ratio can pass.
@pytest.mark.xfail(strict=False, reason=_SHARED_LOOP)
def test_the_other_orgs_p99_under_attack_stays_within_twice_its_idle_p99(
    attacked: fair_share.Outcome,
):
    ratios = {kind: attacked.ratio(kind) for kind in fair_share.KINDS}
    passed = all(not math.isnan(r) and r <= RATIO for r in ratios.values())
    record(
        23,
        "p99-within-2x-idle",
        tried=_tried(),
        passed=passed,
        note=f"A's p99 idle → under attack, measured in the same run: {_figures(attacked)}; "
        f"target ≤ {RATIO:g}x" + ("" if passed else f". xfail: {_SHARED_LOOP}"),
    )
    assert passed, ratios
