"""Preempted and lost attempts (spec/runs.md §4): requeued under the same job id, shown as
``lost`` / ``preempted``, not counted toward ``max_attempts``; the next run sees
``LAKESHORE_PREEMPTED=1``. Real daemons, a real control plane with a short lease."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from daemon_support import J, wait_exists

from lakeshore.attempts import LOST_TOO_OFTEN_ERROR, Tally, tally
from lakeshore.daemon.policies.redelivery import lost_too_often
from lakeshore.daemon.policies.retries import FIRST, UNKNOWN, Earlier, should_retry
from lakeshore.model import Attempt, EventType

#: Runs in the tests' daemons (``tests/daemon/preemption_jobs.py``).
TARGET = "preemption_jobs:stopped_then_fails_once"
#: Long enough for a killed daemon's redelivery, a retry's backoff and the hand-backs.
END_S = 40.0


@pytest_asyncio.fixture
async def control_plane(plane_factory):
    """A lease of 1 s, and a daemon silent for 1 s is lost: a killed daemon's claim comes
    back within seconds."""
    return await plane_factory(ack_wait_s=1, heartbeat_s=0.2, lost_after_s=1)


def _spec(marker: Path, **fields: Any) -> dict[str, Any]:
    return {"fn": TARGET, "args": [str(marker)], "max_attempts": 2, **fields}


async def _ended(bench: Any, inv_id: str) -> dict[str, Any]:
    assert await bench.events.wait_final(inv_id, timeout_s=END_S) is EventType.SUCCEEDED
    await bench.job_state(inv_id, "succeeded")
    return (await bench.api.get(f"{J}/{inv_id}"))[1]


def _seen(marker: Path, n: int) -> dict[str, str | None]:
    return json.loads(Path(f"{marker}.{n}").read_text())


async def test_a_sigkilled_daemons_run_is_lost_requeued_and_not_counted(
    bench, processes, daemons, tmp_path: Path
):
    q = await bench.queue("pre-kill")
    victim = await processes.start("victim", "--queue", q)
    marker = tmp_path / "run"
    [inv_id] = await bench.submit(q, _spec(marker))
    await wait_exists(Path(f"{marker}.1"))
    victim.proc.send_signal(signal.SIGKILL)
    assert await victim.wait() == -signal.SIGKILL
    await daemons.start("heir", queues=[q])
    job = await _ended(bench, inv_id)
    # max_attempts 2: the lost attempt does not count, so the failed one is retried.
    assert [a["outcome"] for a in job["attempts"]] == ["lost", "retrying", "succeeded"]
    assert (job["counted_attempts"], job["max_attempts"]) == (2, 2)
    assert _seen(marker, 1)["LAKESHORE_PREEMPTED"] is None
    assert _seen(marker, 2)["LAKESHORE_PREEMPTED"] == "1"
    assert "LAKESHORE_PREEMPTED=1" in job["attempts"][1]["error"]["message"]
    [done] = bench.events.of(EventType.SUCCEEDED, q)
    assert (await bench.result(inv_id, done.epoch)).value["LAKESHORE_PREEMPTED"] == "1"
    # The takeover is an event, naming the victim's attempt: the control plane's `retrying`
    # (reason lost) when it declared the victim lost first, else the heir's claim, which says
    # what it took over and why (the lease, 1 s here, may run out before the lost mark).
    victim_id = job["attempts"][0]["worker"]
    taken = [(e.epoch, e.detail["worker"]) for e in bench.events.of(EventType.RETRYING, q)
             if (e.detail or {}).get("reason") == "lost"]  # fmt: skip
    taken += [(e.detail["took_over"]["attempt"], e.detail["took_over"]["worker"])
              for e in bench.events.of(EventType.STARTED, q)
              if "took_over" in (e.detail or {})]  # fmt: skip
    assert taken and set(taken) == {(1, victim_id)}, taken


async def test_a_run_its_stopping_daemon_interrupts_is_preempted_and_not_counted(
    bench, daemons, tmp_path: Path
):
    q = await bench.queue("pre-drain")
    first = await daemons.start("first", queues=[q], drain_timeout_s=0.3)
    marker = tmp_path / "run"
    [inv_id] = await bench.submit(q, _spec(marker, stop_grace_s=1))
    await wait_exists(Path(f"{marker}.1"))
    assert await first.retire() == 0
    [retrying] = await bench.events.wait_count(EventType.RETRYING, 1, queue=q)
    assert retrying.detail["reason"] == "interrupted"
    await daemons.start("second", queues=[q])
    job = await _ended(bench, inv_id)
    assert [a["outcome"] for a in job["attempts"]] == ["preempted", "retrying", "succeeded"]
    assert job["counted_attempts"] == 2
    assert _seen(marker, 2)["LAKESHORE_PREEMPTED"] == "1"


def _attempt(epoch: int, outcome: str) -> Attempt:
    return Attempt(attempt=epoch, worker="w", seq=1, epoch=epoch, outcome=outcome)


@pytest.mark.parametrize(
    ("outcomes", "before", "expected"),
    [
        ([], None, Tally()),
        (["retrying", "retrying", "failed"], None, Tally(counted=3, executions=3)),
        (["timed_out", "crashed", "succeeded"], None, Tally(counted=3, executions=3)),
        (["lost", "preempted", "retrying"], None, Tally(counted=1, preempted=True, executions=3)),
        (
            ["retrying", "lost", "lost"],
            None,
            Tally(counted=1, lost_in_row=2, preempted=True, executions=3),
        ),
        (
            ["lost", "retrying", "lost"],
            None,
            Tally(counted=1, lost_in_row=1, preempted=True, executions=3),
        ),
        # Asked by the redelivery of epoch 4: the attempt left running is lost.
        (["lost", "lost", "running"], 4, Tally(lost_in_row=3, preempted=True, executions=3)),
        (["retrying", "running"], 2, Tally(counted=1, executions=1)),
        (["stale", "lost"], None, Tally(lost_in_row=1, preempted=True, executions=2)),
    ],
)
def test_the_tally_counts_failures_and_lost_attempts_in_a_row(
    outcomes: list[str], before: int | None, expected: Tally
) -> None:
    attempts = [_attempt(n, o) for n, o in enumerate(outcomes, 1)]
    assert tally(attempts, before=before) == expected


def test_a_redelivery_without_an_answer_counts_every_delivery_and_is_never_a_poison():
    assert FIRST.attempt(1) == 1 and not FIRST.preempted
    assert Earlier(counted=1, lost_in_row=2, preempted=True).attempt(7) == 2
    assert UNKNOWN.attempt(4) == 4
    # Its number among all attempts: the history's count, else the delivery count.
    assert Earlier(counted=1, executions=3).number(9) == 4
    assert UNKNOWN.number(4) == 4 and FIRST.number(1) == 1
    assert should_retry(UNKNOWN.attempt(2), 2) is False
    assert lost_too_often(UNKNOWN, max_lost=1) is None


def test_max_lost_lost_attempts_in_a_row_make_a_poison_pill():
    assert lost_too_often(Earlier(lost_in_row=2), max_lost=3) is None
    error = lost_too_often(Earlier(lost_in_row=3), max_lost=3)
    assert error is not None and error.type == LOST_TOO_OFTEN_ERROR
    assert "lost 3 attempts in a row" in error.message and "died each time" in error.message
