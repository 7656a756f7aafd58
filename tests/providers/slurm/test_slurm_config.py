"""A slurm provider's config and the sbatch command line made from it (no cluster needed)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from lakeshore.errors import Invalid
from lakeshore.model import Worker, now
from lakeshore.providers.slurm_commands import JobState
from lakeshore.providers.slurm_config import SlurmConfig, command_env, parse_config, sbatch_argv

WORKER = Worker(id="w-1", name="train-00", namespace="ml", started_at=now())
DAEMON = ["/opt/venv/bin/python", "-m", "lakeshore", "daemon", "run", "--label", "team=a b"]


def test_an_empty_config_submits_to_the_clusters_defaults():
    config = parse_config({})
    assert config == SlurmConfig() and config.poll_s == 5.0
    assert sbatch_argv(config, WORKER, Path("/logs/ml"), DAEMON) == [
        "sbatch", "--parsable", "--job-name=lakeshore-train-00",
        "--output=/logs/ml/train-00-%j.log", "--export=ALL",
        "--wrap", "exec " + shlex.join(DAEMON),
    ]  # fmt: skip


def test_every_setting_becomes_its_sbatch_flag_and_extra_args_follow_them():
    config = parse_config(
        {
            "partition": "gpu",
            "gres": "gpu:a100:1",
            "time": "1-04:00:00",
            "account": "ml",
            "qos": "high",
            "cpus_per_task": 8,
            "mem": "64G",
            "chdir": "/scratch/ml",
            "extra_args": ["--constraint=a100", "--exclusive"],
            "log_dir": "/shared/logs",
            "python": "/opt/venv/bin/python",
            "slurm_conf": "/etc/slurm/other.conf",
            "nats_url": "tls://nats.internal:4222",
            "poll_s": 2,
        }
    )
    argv = sbatch_argv(config, WORKER, Path("/shared/logs"), DAEMON)
    flags = argv[argv.index("--export=ALL") + 1 : argv.index("--wrap")]
    assert flags == [
        "--partition=gpu", "--gres=gpu:a100:1", "--time=1-04:00:00", "--account=ml",
        "--qos=high", "--cpus-per-task=8", "--mem=64G", "--chdir=/scratch/ml",
        "--constraint=a100", "--exclusive",
    ]  # fmt: skip
    # The wrapped command is one shell word per argument, whatever it holds.
    assert shlex.split(argv[-1]) == ["exec", *DAEMON]


def test_a_percent_in_the_log_dir_is_not_a_filename_pattern():
    argv = sbatch_argv(SlurmConfig(), WORKER, Path("/logs/100%"), DAEMON)
    assert "--output=/logs/100%%/train-00-%j.log" in argv


def test_slurm_conf_is_set_for_the_commands_and_kept_out_otherwise():
    assert command_env(SlurmConfig()) is None
    assert command_env(SlurmConfig(), {"A": "1"}) == {"A": "1"}
    env = command_env(SlurmConfig(slurm_conf="/etc/slurm/x.conf"), {"A": "1"})
    assert env == {"A": "1", "SLURM_CONF": "/etc/slurm/x.conf"}


@pytest.mark.parametrize(
    "time", ["90", "30:00", "04:00:00", "2-00", "2-12:30", "2-12:30:00", "UNLIMITED"]
)
def test_every_sbatch_time_form_is_accepted(time):
    assert parse_config({"time": time}).time == time


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"time": 14400}, "quote it"),
        ({"time": "4h"}, "$.time"),
        ({"mem": "1.5G"}, "$.mem"),
        ({"gres": ""}, "$.gres"),
        ({"account": "--all"}, "$.account"),
        ({"log_dir": "logs"}, "log_dir must be an absolute path, not 'logs' - at `$.log_dir`"),
        ({"chdir": "~/work"}, "$.chdir"),
        ({"python": " "}, "$.python"),
        ({"extra_args": ["a100", "--constraint"]}, "$.extra_args"),
        ({"extra_args": ["--output=/tmp/x"]}, "may not contain"),
        ({"extra_args": ["--array=1-4"]}, "no --array"),
        ({"extra_args": ["-o", "/tmp/x"]}, "may not contain '-o'"),
        ({"extra_args": ["--par"]}, "may not contain"),
        ({"cpus_per_task": "four"}, "Expected `int | null`, got `str` - at `$.cpus_per_task`"),
        ({"partition": 3}, "Expected `str | null`, got `int` - at `$.partition`"),
        ({"nodes": 2}, "the settings are: partition, gres, time"),
    ],
)
def test_a_bad_config_says_which_setting_and_what_is_expected(config, says):
    with pytest.raises(Invalid) as caught:
        parse_config(config)
    assert says in caught.value.message


def test_numbers_may_come_as_strings_as_the_cli_sends_them():
    config = parse_config({"cpus_per_task": "8", "poll_s": "2.5", "time": "90", "mem": "4G"})
    assert (config.cpus_per_task, config.poll_s, config.time) == (8, 2.5, "90")
    assert config.mem == "4G"
    assert "--mem=16000" in sbatch_argv(parse_config({"mem": 16000}), WORKER, Path("/l"), DAEMON)


def test_extra_args_may_use_flags_that_only_start_like_the_providers_own():
    config = parse_config({"extra_args": ["--exclusive", "--open-mode=append", "-e", "/x"]})
    assert config.extra_args == ["--exclusive", "--open-mode=append", "-e", "/x"]


@pytest.mark.parametrize(
    ("state", "status", "code"),
    [
        ("COMPLETED", "0", 0),
        ("FAILED", "768", 3),
        ("FAILED", "9", -9),
        ("CANCELLED", "15", -15),
        ("CANCELLED", "0", None),
        ("TIMEOUT", "", None),
    ],
)
def test_a_jobs_wait_status_becomes_the_daemons_exit_code(state, status, code):
    assert JobState(state, "debug", "n1", status).returncode() == code
