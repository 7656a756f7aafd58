"""The Recorder's invocation metrics, counted per batch: the same exposition as
``prometheus_client``'s own ``Counter`` and ``Histogram`` given one event at a time."""

from __future__ import annotations

import re
from datetime import timedelta

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from lakeshore.fencing import Fenced
from lakeshore.ids import new_id, submitted_at
from lakeshore.metrics.invocations import BUCKETS_S, InvocationMetrics
from lakeshore.model import EventType, InvocationEvent


def _event(inv: str, type_: EventType, after_s: float, epoch: int = 1) -> InvocationEvent:
    at = submitted_at(inv)
    assert at is not None
    return InvocationEvent(
        namespace="ns", queue="q", invocation_id=inv, ts=at + timedelta(seconds=after_s),
        type=type_, attempt=1, worker="w", epoch=epoch, detail={},
    )  # fmt: skip


def _samples(registry: CollectorRegistry, family: str) -> dict[str, float]:
    text = generate_latest(registry).decode()
    lines = re.findall(rf"^({family}_(?:bucket|count|sum)\S*) (\S+)$", text, re.M)
    return {name: float(value) for name, value in lines}


def test_a_batch_counts_as_its_events_would_one_by_one() -> None:
    registry = CollectorRegistry()
    metrics = InvocationMetrics(registry)
    # Waits and runs on the bucket bounds themselves (a bound holds values equal to it),
    # between them, and past the last one.
    seconds = [0.0, 0.005, 0.0051, 0.25, 1, 7.5, 3600, 5000]
    ids = [new_id() for _ in seconds]
    events = [_event(i, EventType.SUBMITTED, 0) for i in ids]
    events += [_event(i, EventType.STARTED, s) for i, s in zip(ids, seconds, strict=True)]
    events += [_event(ids[0], EventType.STARTED, 1, epoch=2)]  # a redelivery: no wait
    ends = [EventType.SUCCEEDED, EventType.FAILED, EventType.CANCELLED, EventType.SUCCEEDED]
    events += [
        _event(i, ends[n % 4], 2 * s + 1) for n, (i, s) in enumerate(zip(ids, seconds, strict=True))
    ]
    events += [_event(ids[1], EventType.STALE, 3)]
    metrics.observe(Fenced(events=events[:5]))  # batches split anywhere count the same
    metrics.observe(Fenced(events=events[5:]))

    expected = CollectorRegistry()
    wait = Histogram("lakeshore_invocation_wait_seconds", "", buckets=BUCKETS_S, registry=expected)
    run = Histogram("lakeshore_invocation_run_seconds", "", buckets=BUCKETS_S, registry=expected)
    for s in seconds:
        wait.observe(s)
    run.observe(0)  # ids[0]'s run counts from its redelivered start (1 s), to its end (1 s)
    for s in seconds[1:]:
        run.observe(s + 1)
    for family in ("lakeshore_invocation_wait_seconds", "lakeshore_invocation_run_seconds"):
        assert _samples(registry, family) == _samples(expected, family), family
    end_to_end = _samples(registry, "lakeshore_invocation_end_to_end_seconds")
    assert end_to_end["lakeshore_invocation_end_to_end_seconds_count"] == len(seconds)
    assert end_to_end["lakeshore_invocation_end_to_end_seconds_sum"] == sum(
        2 * s + 1 for s in seconds
    )

    value = registry.get_sample_value
    assert value("lakeshore_invocations_submitted_total") == len(seconds)
    assert value("lakeshore_invocations_redelivered_total") == 1
    assert value("lakeshore_completions_stale_total") == 1
    finished = {
        t: value("lakeshore_invocations_finished_total", {"outcome": t.value}) for t in ends
    }
    assert finished == {
        EventType.SUCCEEDED: 4, EventType.FAILED: 2, EventType.CANCELLED: 2,
    }  # fmt: skip
    assert value("lakeshore_invocations_finished_total", {"outcome": "dropped"}) == 0
