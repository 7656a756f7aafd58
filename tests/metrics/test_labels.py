"""The per-queue label cap, as a pure policy, and its setting."""

from __future__ import annotations

import pytest

from lakeshore.config import load_server_settings
from lakeshore.errors import Invalid
from lakeshore.metrics import QueueLabels


@pytest.mark.parametrize(
    ("text", "top"), [("all", None), ("none", 0), ("top:1", 1), ("top:100", 100)]
)
def test_the_policy_parses_all_none_and_top_n(text, top):
    assert QueueLabels.parse(text).top == top


@pytest.mark.parametrize("text", ["", "top:", "top:0", "top:-1", "some", "top:1x", "ALL"])
def test_a_bad_policy_is_refused(text):
    with pytest.raises(Invalid, match="metrics_per_queue"):
        QueueLabels.parse(text)


def test_a_bad_setting_fails_at_start_up(tmp_path):
    with pytest.raises(Invalid, match="metrics_per_queue"):
        load_server_settings({"data_dir": str(tmp_path), "metrics_per_queue": "top:x"}, env={})


def test_top_n_keeps_the_busiest_queues_ties_by_name():
    busy = [(("a", "q1"), 5), (("a", "q2"), 9), (("b", "q3"), 5), (("a", "q0"), 0)]
    assert QueueLabels(2).named(busy) == {("a", "q2"), ("a", "q1")}
    assert QueueLabels(None).named(busy) == {k for k, _ in busy}
    assert QueueLabels(0).named(busy) == set()


def test_the_server_flags_and_environment_set_the_metrics_settings(tmp_path):
    flags = {"data_dir": str(tmp_path), "metrics_per_queue": "none", "metrics_host": "0.0.0.0"}
    settings = load_server_settings(flags, env={"LAKESHORE_METRICS_PORT": "9464"})
    assert (settings.metrics_port, settings.metrics_host) == (9464, "0.0.0.0")
    assert settings.metrics_per_queue == "none"
    assert load_server_settings({"data_dir": str(tmp_path)}, env={}).metrics_port is None
