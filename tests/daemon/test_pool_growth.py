"""When the worker pool starts another worker process (pool_growth, pure)."""

from __future__ import annotations

import math

from lakeshore.daemon.pool_growth import Ewma, expected_wait_s, remaining_s, should_start

START = 0.1


def test_a_run_with_no_worker_of_its_environment_starts_one():
    assert expected_wait_s(1, busy_s=[], starting_s=[], mean_s=None, start_s=START) == math.inf
    assert should_start(1, busy_s=[], starting_s=[], mean_s=0.001, start_s=START, cores=0)


def test_small_runs_queue_on_the_busy_workers_rather_than_start_new_ones():
    # 60 runs wait on 2 workers doing 1 ms runs: the last one is 30 ms away, a start 100 ms.
    busy = [0.0002, 0.0005]
    assert expected_wait_s(60, busy_s=busy, starting_s=[], mean_s=0.001, start_s=START) < START
    assert not should_start(60, busy_s=busy, starting_s=[], mean_s=0.001, start_s=START, cores=2)


def test_below_one_worker_per_core_a_waiting_run_starts_one():
    assert should_start(2, busy_s=[0.0], starting_s=[], mean_s=0.001, start_s=START, cores=2)
    assert not should_start(2, busy_s=[0.0], starting_s=[0.0], mean_s=0.001, start_s=START,
                            cores=2)  # fmt: skip


def test_runs_of_ten_ms_or_more_get_a_worker_each_though_one_would_free_first():
    # 150 ms runs, a start of 300 ms: waiting is sooner for this run, but a worker more
    # doubles what the daemon gets done from now on.
    assert should_start(3, busy_s=[0.0, 0.0], starting_s=[], mean_s=0.15, start_s=0.3, cores=2)
    assert not should_start(3, busy_s=[0.0, 0.0], starting_s=[], mean_s=0.005, start_s=0.3,
                            cores=2)  # fmt: skip


def test_before_any_run_ended_as_many_start_at_once_as_there_are_cores():
    assert should_start(3, busy_s=[0.0, 0.0], starting_s=[0.0], mean_s=None, start_s=START,
                        cores=2)  # fmt: skip
    assert not should_start(5, busy_s=[0.0, 0.0], starting_s=[0.0, 0.0], mean_s=None,
                            start_s=START, cores=2)  # fmt: skip


def test_long_runs_start_a_worker_for_each_waiting_run():
    # Runs of an hour: no busy worker frees before a new one starts, for any run waiting.
    for position in (1, 2, 5):
        busy = [1.0, 2.0]
        starting = [0.0] * (position - 1)  # those started for the runs ahead of it
        assert should_start(position, busy_s=busy, starting_s=starting, mean_s=3600,
                            start_s=START)  # fmt: skip


def test_before_any_run_ended_runs_wait_for_the_workers_being_started():
    # A drain's first moment on one core: one worker starting, the others wait for it...
    assert not should_start(40, busy_s=[], starting_s=[0.0], mean_s=None, start_s=START)
    # ...and once it has started, the next start begins.
    assert should_start(40, busy_s=[0.5], starting_s=[], mean_s=None, start_s=START)


def test_a_run_longer_than_the_mean_is_guessed_to_go_on_as_long_again():
    assert remaining_s(0.25, mean_s=1.0) == 0.75
    assert remaining_s(3.0, mean_s=1.0) == 3.0
    assert remaining_s(3.0, mean_s=None) == 3.0
    # One worker stuck on a long run among quick ones: the others still serve in time.
    assert not should_start(3, busy_s=[30.0, 0.0], starting_s=[], mean_s=0.001, start_s=START)
    assert should_start(1, busy_s=[30.0], starting_s=[], mean_s=0.001, start_s=START)


def test_the_mean_follows_its_samples():
    mean = Ewma(weight=0.5)
    assert mean.value is None
    mean.add(1.0)
    mean.add(3.0)
    assert mean.value == 2.0
    assert Ewma(initial=0.1).value == 0.1
