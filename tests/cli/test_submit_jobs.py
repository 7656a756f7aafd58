"""``lakeshore submit`` and ``lakeshore jobs`` against the real control plane, and with a
real daemon (a ``lakeshore daemon run`` subprocess) for results."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner, Result
from support import daemon_process

from lakeshore.actors.recorder import WaitRecorded
from lakeshore.bus import codec, subjects
from lakeshore.cli.exits import API_ERROR, OK, USAGE
from lakeshore.cli.jobs import cancel_message, job_block, jobs_listing, jobs_table, show_result
from lakeshore.cli.main import lakeshore
from lakeshore.cli.tracebacks import folded
from lakeshore.model import (
    Attempt,
    BatchTally,
    EventBatch,
    EventType,
    Invocation,
    InvocationEvent,
    JobDetail,
    JobList,
)
from lakeshore.model import Job as ModelJob
from lakeshore.model import Result as ModelResult

Invoke = Callable[..., Awaitable[Result]]
Q = "/v1/namespaces/default/queues"


@pytest.fixture
def cli(control_plane, monkeypatch, tmp_path) -> Invoke:
    """``await cli("submit", …)`` with the control plane's URL and admin token in the
    environment; run on a thread, since the control plane serves on the test's loop."""
    for var in ("LAKESHORE_NAMESPACE", "LAKESHORE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    env = {"LAKESHORE_API": control_plane.api, "LAKESHORE_TOKEN": control_plane.admin_token}

    async def invoke(*args: str, expect: int = OK, remote_traceback: bool = False) -> Result:
        runner = CliRunner(env=env)
        result = await asyncio.to_thread(
            runner.invoke, lakeshore, list(args), prog_name="lakeshore"
        )
        assert result.exit_code == expect, (result.stdout, result.stderr, result.exception)
        # Only a failed function's own (remote) traceback may be shown, never the CLI's.
        assert ("Traceback" in result.output) == remote_traceback, result.output
        return result

    return invoke


@pytest.fixture
async def queue(api) -> str:
    status, body = await api.post(Q, {"name": "cpu-prep"})
    assert status == 201, body
    return "cpu-prep"


async def caught_up(control_plane, js) -> None:
    """Wait until the Recorder has recorded every event published so far: the jobs routes
    read its records, which trail a submit's answer by moments."""
    last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    async with asyncio.timeout(10):
        await (await control_plane.plane.parts.recorder.ask(WaitRecorded(last)))


async def stored(js, stream: str = "LS_default_cpu-prep") -> list[Invocation]:
    info = await js.stream_info(stream)
    return [
        msgspec.json.decode((await js.get_msg(stream, seq)).data, type=Invocation)
        for seq in range(info.state.first_seq, info.state.last_seq + 1)
    ]


# ---- submit -------------------------------------------------------------------------


async def test_submit_a_command_prints_its_id_and_lands_on_the_queue(cli, queue, js):
    result = await cli(
        "submit", "--queue", queue, "--env", "A=1", "--timeout", "9", "--stop-grace-s", "2",
        "--", "echo", "-n", "hi",
    )  # fmt: skip
    [msg] = await stored(js)
    assert result.stdout == f"{msg.id}\n"
    assert (msg.command, msg.env, msg.timeout_s, msg.stop_grace_s, msg.fn) == (
        ["echo", "-n", "hi"],
        {"A": "1"},
        9,
        2,
        None,
    )


async def test_options_after_the_first_word_belong_to_the_command(cli, queue, js):
    await cli("submit", "-q", queue, "python", "-c", "print(1)", "-n", "x")
    [msg] = await stored(js)
    assert msg.command == ["python", "-c", "print(1)", "-n", "x"]


async def test_submit_a_function_with_json_arguments(cli, queue, js):
    result = await cli(
        "submit", "--queue", queue, "--fn", "tasks:train",
        "--args", '[{"lr": 0.1}, 3]', "--kwargs", '{"epochs": 2}',
        "--max-attempts", "3", "--idempotency-key", "run-7",
    )  # fmt: skip
    [msg] = await stored(js)
    assert result.stdout.strip() == msg.id
    assert (msg.fn, msg.args, msg.kwargs, msg.max_attempts) == (
        "tasks:train",
        [{"lr": 0.1}, 3],
        {"epochs": 2},
        3,
    )
    again = await cli(
        "submit", "--queue", queue, "--fn", "tasks:train",
        "--args", '[{"lr": 0.1}, 3]', "--kwargs", '{"epochs": 2}',
        "--max-attempts", "3", "--idempotency-key", "run-7",
    )  # fmt: skip
    assert again.stdout == result.stdout
    other = await cli(
        "submit", "--queue", queue, "--fn", "tasks:train", "--idempotency-key", "run-7",
        expect=API_ERROR,
    )  # fmt: skip
    assert "idempotency key 'run-7'" in other.stderr and "another body" in other.stderr
    assert len(await stored(js)) == 1


async def test_submit_prints_warnings_on_stderr(cli, queue):
    result = await cli("submit", "--queue", queue, "--", "true")
    assert result.stderr.startswith("warning: no_members: queue 'cpu-prep' has no daemons")
    assert len(result.stdout.split()) == 1


async def test_submit_json_output_is_the_api_answer(cli, queue, register):
    await register("w", queues=[queue])
    result = await cli("submit", "--queue", queue, "-o", "json", "--", "true")
    answer = json.loads(result.stdout)
    assert (answer["queue"], answer["namespace"], answer["warnings"]) == (queue, "default", [])
    assert len(answer["ids"]) == 1 and result.stderr == ""


async def test_submit_with_priority_picks_the_level(cli, api, js):
    await api.post(Q, {"name": "gpu", "kind": "priority"})
    await cli("submit", "--queue", "gpu", "--priority", "8", "--", "nvidia-smi")
    [msg] = await stored(js, "LS_default_gpu")
    assert msg.priority == 8


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--queue", "q"], "give exactly one of a command"),
        (["--queue", "q", "--fn", "m:f", "--", "echo"], "give exactly one of a command"),
        (
            ["--queue", "q", "--fn", "m:f", "--args", "[1,"],
            "Invalid value for --args: not valid JSON",
        ),  # fmt: skip
        (["--queue", "q", "--fn", "m:f", "--args", '{"a": 1}'], "must be a JSON array"),
        (["--queue", "q", "--fn", "m:f", "--kwargs", "[1]"], "must be a JSON object"),
        (["--queue", "q", "--args", "[1]", "--", "echo"], "--args and --kwargs go with --fn"),
        (["--queue", "q", "--fn", "m:f", "--env", "A=1"], "--env is for commands"),
        (["--queue", "q", "--env", "A", "--", "echo"], "expected KEY=VALUE, got item 1"),
        (["--queue", "q", "--priority", "10", "--", "echo"], "10 is not in the range 0<=x<=9"),
        (["--queue", "q", "--timeout", "0", "--", "echo"], "--timeout"),
        (["--", "echo"], "Missing option '--queue'"),
    ],
)
async def test_submit_usage_errors_exit_2(cli, queue, js, args, needle):
    result = await cli("submit", *args, expect=USAGE)
    assert needle in result.stderr
    assert (await js.stream_info("LS_default_cpu-prep")).state.messages == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--queue", "nope", "--", "echo"], "error: queue 'nope' does not exist"),
        (["--queue", "cpu-prep", "--fn", "no-colon"], "must look like 'package.module:function'"),
        (["--queue", "cpu-prep", "--priority", "3", "--", "echo"], "queue 'cpu-prep' is fifo"),
    ],
)
async def test_submit_refused_by_the_api_exits_1(cli, queue, args, needle):
    result = await cli("submit", *args, expect=API_ERROR)
    assert needle in result.stderr and result.stdout == ""


async def test_submit_to_a_draining_queue_exits_1(cli, api, queue):
    await api.post(f"{Q}/{queue}/drain")
    result = await cli("submit", "--queue", queue, "--", "echo", expect=API_ERROR)
    assert result.stderr.startswith("error: queue 'cpu-prep' is draining")


# ---- jobs ---------------------------------------------------------------------------


async def test_jobs_ls_shows_submitted_invocations_newest_first(cli, queue, control_plane, js):
    first = (await cli("submit", "--queue", queue, "--", "echo", "1")).stdout.strip()
    second = (await cli("submit", "--queue", queue, "--fn", "m:f")).stdout.strip()
    await caught_up(control_plane, js)
    header, *rows = (await cli("jobs", "ls")).stdout.strip().splitlines()
    assert header.split() == [
        "ID", "QUEUE", "STATE", "ATTEMPT", "WORKER", "DURATION", "WHAT", "SUBMITTED",
        "PENDING_REASON",
    ]  # fmt: skip
    assert [r.split()[:5] for r in rows] == [
        [second, queue, "pending", "0/1", "-"],
        [first, queue, "pending", "0/1", "-"],
    ]
    assert all(r.split()[-1] == "no_members" for r in rows)


def test_jobs_ls_shows_the_workers_name_or_its_id_once_the_row_is_gone():
    def job(i: str, **worker: str) -> ModelJob:
        return ModelJob(id=i, namespace="default", queue="q", state="running", **worker)

    table = jobs_table([
        job("a", worker="w-51cf25801b8f", worker_name="trainer-7"),
        job("b", worker="w-0123456789ab"),
        job("c"),
    ])  # fmt: skip
    header, *rows = [line.split() for line in table.splitlines()]
    at = header.index("WORKER")
    assert [r[at] for r in rows] == ["trainer-7", "w-0123456789ab", "-"]


def test_a_traceback_keeps_the_users_frames_and_folds_lakeshores():
    text = """Traceback (most recent call last):
  File "/srv/venv/lib/python3.11/site-packages/lakeshore/daemon/runner.py", line 193, in _call
    value = resolve(ref)(*args, **kwargs)
            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/home/me/lakeshore/tasks.py", line 4, in boom
    raise ValueError(f"bad {x}")
ValueError: bad 3
"""
    assert folded(text).splitlines() == [
        "Traceback (most recent call last):",
        "  (1 Lakeshore frame folded; -o json has them)",
        '  File "/home/me/lakeshore/tasks.py", line 4, in boom',
        '    raise ValueError(f"bad {x}")',
        "ValueError: bad 3",
    ]


def test_cancelling_a_running_job_names_its_daemon_by_name():
    job = ModelJob(
        id="j", namespace="default", queue="q", state="running", worker="w-51cf25801b8f",
        worker_name="trainer-7",
    )  # fmt: skip
    assert cancel_message(job) == "cancelling j: its daemon trainer-7 is told to stop it"


def test_jobs_ls_says_what_runs_and_for_how_long():
    at = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    argv = ["python", "train.py", "--epochs", "100", "--data", "/datasets/imagenet/train"]
    rows = [
        ModelJob(id="a", namespace="d", queue="q", state="succeeded", fn="pkg.mod:train",
                 started_at=at, finished_at=at + timedelta(minutes=3, seconds=4)),
        ModelJob(id="b", namespace="d", queue="q", state="failed", command=argv,
                 started_at=at, finished_at=at + timedelta(seconds=4.25)),
        ModelJob(id="c", namespace="d", queue="q", state="running", command=["true"],
                 started_at=datetime.now(UTC) - timedelta(hours=2, minutes=5, seconds=1)),
        ModelJob(id="d", namespace="d", queue="q", state="pending", fn="m:f"),
    ]  # fmt: skip
    header, *lines = jobs_table(rows).splitlines()
    duration, what = header.index("DURATION"), header.index("WHAT")
    cells = [(line[duration:what].strip(), line[what:].split("  ")[0]) for line in lines]
    assert cells == [
        ("3m04s", "pkg.mod:train"),
        ("4.25s", "python train.py --epochs 100 --data /da…"),
        ("2h05m", "true"),
        ("-", "m:f"),
    ]


def test_a_failed_jobs_cause_and_an_attempts_signal_are_shown():
    row = ModelJob(id="t", namespace="d", queue="q", state="failed", fn="m:f", cause="timed_out")
    header, line = jobs_table([row]).splitlines()
    state = header.index("STATE")
    assert line[state:].split("  ")[0] == "failed (timed_out)"
    attempts = [
        Attempt(attempt=1, worker="w", seq=1, epoch=1, outcome="crashed", signal="SIGSEGV"),
        Attempt(attempt=2, worker="w", seq=1, epoch=3, outcome="timed_out", killed=True),
        Attempt(attempt=3, worker="w", seq=1, epoch=4, outcome="timed_out", killed=False),
    ]
    detail = JobDetail(id="t", namespace="d", queue="q", state="failed", cause="timed_out",
                       max_attempts=3, counted_attempts=3, attempts=attempts)  # fmt: skip
    text = job_block(detail)
    assert "crashed (SIGSEGV)" in text and "timed_out (SIGKILL)" in text
    assert text.splitlines()[-1].split()[6] == "timed_out"


def test_jobs_ls_sums_up_each_batch_under_the_table():
    def job(i: str, state: str, batch: str | None = None) -> ModelJob:
        return ModelJob(id=i, namespace="d", queue="q", state=state, fn="m:f", batch=batch)

    page = JobList(
        jobs=[job("c", "failed", "a"), job("b", "succeeded", "a"), job("x", "pending")],
        batches=[BatchTally(id="a", size=200, states={"succeeded": 198, "failed": 2})],
    )
    text = jobs_listing(page)
    assert text.splitlines()[:4] == jobs_table(page.jobs).splitlines()
    assert text.splitlines()[-1] == "batch a: 200 — 198 succeeded, 2 failed"


async def test_jobs_ls_of_a_batch_has_its_summary_line(cli, queue, control_plane, js, api):
    body = {"invocations": [{"command": ["true"]} for _ in range(3)]}
    status, answer = await api.post(f"{Q}/{queue}/invocations", body)
    assert status == 202, answer
    await caught_up(control_plane, js)
    out = (await cli("jobs", "ls")).stdout
    assert out.splitlines()[-1] == f"batch {answer['ids'][0]}: 3 — 3 pending"
    listed = json.loads((await cli("jobs", "ls", "-o", "json")).stdout)
    assert {j["batch"] for j in listed["jobs"]} == {answer["ids"][0]}


async def test_jobs_retry_of_a_cancelled_command_links_both_ways(cli, queue, control_plane, js):
    old = (await cli("submit", "-q", queue, "--env", "K=v1", "--", "echo", "hi")).stdout.strip()
    await caught_up(control_plane, js)
    await cli("jobs", "cancel", old)
    refused = await cli("jobs", "retry", old, expect=API_ERROR)
    assert refused.stderr.startswith("error: ") and "env K" in refused.stderr
    out = (await cli("jobs", "retry", old, "--env", "K=v2")).stdout
    new = out.split()[-1]
    assert out == f"retried {old} as {new}\n"
    await caught_up(control_plane, js)
    [msg] = await stored(js)
    assert (msg.id, msg.command, msg.env) == (new, ["echo", "hi"], {"K": "v2"})
    shown_old = json.loads((await cli("jobs", "show", old, "-o", "json")).stdout)
    assert shown_old["retried_by"] == [new]
    shown_new = (await cli("jobs", "show", new)).stdout
    lines = dict(line.split(":", 1) for line in shown_new.splitlines() if ":" in line)
    assert lines["retry_of"].strip() == old
    again = await cli("jobs", "retry", new, expect=API_ERROR)
    assert f"job {new!r} is pending" in again.stderr


async def test_jobs_show_lists_the_error_of_every_attempt(cli, api, queue, control_plane, js):
    job_id = (await cli("submit", "-q", queue, "--fn", "m:f", "--max-attempts", "2")).stdout.strip()
    events = []
    for epoch, kind in ((1, EventType.RETRYING), (2, EventType.FAILED)):
        error = {"type": "builtins.ValueError", "message": f"bad {epoch}"}
        for t, detail in ((EventType.STARTED, {}), (kind, {"error": error})):
            events.append(InvocationEvent(
                namespace="default", queue=queue, invocation_id=job_id, ts=datetime.now(UTC),
                type=t, attempt=epoch, epoch=epoch, worker=f"w-{epoch}", detail=detail,
            ))  # fmt: skip
    await js.publish(
        subjects.event_subject("default", queue), codec.encode(EventBatch(events=events))
    )
    await caught_up(control_plane, js)
    out = (await cli("jobs", "show", job_id)).stdout
    header, first, second = out.split("attempts: 2\n")[1].strip().splitlines()
    assert header.split()[-1] == "ERROR"
    assert first.endswith("retrying  builtins.ValueError: bad 1")
    assert second.endswith("failed    builtins.ValueError: bad 2")


async def test_jobs_result_of_a_running_job_names_its_worker(
    cli, queue, control_plane, js, register
):
    worker = await register("trainer-7", queues=[queue])
    job_id = (await cli("submit", "-q", queue, "--fn", "m:f")).stdout.strip()
    started = [
        InvocationEvent(namespace="default", queue=queue, invocation_id=job_id,
                        ts=datetime.now(UTC), type=t, attempt=1, epoch=1, worker=worker.id)
        for t in (EventType.CLAIMED, EventType.STARTED)
    ]  # fmt: skip
    await js.publish(
        subjects.event_subject("default", queue), codec.encode(EventBatch(events=started))
    )
    await caught_up(control_plane, js)
    waited = await cli("jobs", "result", job_id, "-o", "json", expect=API_ERROR)
    body = json.loads(waited.stdout)
    assert (body["state"], body["worker"], body["worker_name"]) == (
        "running",
        worker.id,
        "trainer-7",
    )


async def test_jobs_ls_filters_and_pages(cli, api, queue, control_plane, js):
    await api.post(Q, {"name": "other"})
    mine = [(await cli("submit", "-q", queue, "--", "true")).stdout.strip() for _ in range(3)]
    await cli("submit", "-q", "other", "--", "true")
    await caught_up(control_plane, js)
    listed = json.loads((await cli("jobs", "ls", "--queue", queue, "-o", "json")).stdout)
    assert [j["id"] for j in listed["jobs"]] == mine[::-1]
    page = json.loads((await cli("jobs", "ls", "-q", queue, "--limit", "2", "-o", "json")).stdout)
    assert [j["id"] for j in page["jobs"]] == mine[:0:-1]
    rest = json.loads(
        (await cli("jobs", "ls", "-q", queue, "--after", mine[1], "-o", "json")).stdout
    )
    assert [j["id"] for j in rest["jobs"]] == [mine[0]]
    running = json.loads((await cli("jobs", "ls", "--state", "running", "-o", "json")).stdout)
    assert running["jobs"] == []


async def test_jobs_show_has_a_key_value_block_and_attempts(cli, queue, control_plane, js):
    job_id = (await cli("submit", "--queue", queue, "--", "echo", "hi")).stdout.strip()
    await caught_up(control_plane, js)
    out = (await cli("jobs", "show", job_id)).stdout
    lines = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    assert lines["id"].strip() == job_id
    assert lines["state"].strip() == "pending"
    assert lines["command"].strip() == "[echo, hi]"
    assert "attempts: (none)" in out


async def test_jobs_result_of_an_unfinished_job_exits_1_and_says_so(cli, queue, control_plane, js):
    job_id = (await cli("submit", "--queue", queue, "--", "echo", "hi")).stdout.strip()
    await caught_up(control_plane, js)
    result = await cli("jobs", "result", job_id, expect=API_ERROR)
    assert result.stderr.startswith(f"error: invocation {job_id} has not finished: it is pending")
    assert "--wait" in result.stderr
    waited = await cli("jobs", "result", job_id, "--wait", "0.3", "-o", "json", expect=API_ERROR)
    assert json.loads(waited.stdout)["state"] == "pending"


async def test_jobs_cancel_a_pending_job(cli, queue, control_plane, js):
    job_id = (await cli("submit", "--queue", queue, "--", "sleep", "60")).stdout.strip()
    await caught_up(control_plane, js)
    assert (await cli("jobs", "cancel", job_id)).stdout == f"cancelled {job_id}\n"
    shown = json.loads((await cli("jobs", "show", job_id, "-o", "json")).stdout)
    assert shown["state"] == "cancelled"
    assert (await js.stream_info("LS_default_cpu-prep")).state.messages == 0
    again = await cli("jobs", "cancel", job_id, expect=API_ERROR)
    assert again.stderr.startswith("error: ")
    result = await cli("jobs", "result", job_id, expect=API_ERROR)
    assert result.stderr == f"error: invocation {job_id} was cancelled\n"


async def test_jobs_of_an_unknown_id_exit_1(cli):
    for verb in ("show", "result", "cancel", "retry"):
        result = await cli("jobs", verb, "0192f0c0-0000-7000-8000-000000000000", expect=API_ERROR)
        assert result.stderr.startswith("error: "), verb


# ---- with a daemon: results -----------------------------------------------------------


@pytest.fixture
async def daemon(control_plane, queue, tmp_path) -> AsyncIterator[None]:
    """``lakeshore daemon run`` on the queue, as a subprocess (it can import ``udf_targets``)."""
    log = tmp_path / "daemon.log"
    async with daemon_process(
        control_plane, queue, "cli-daemon", Path(__file__).parents[1] / "sdk", log
    ):
        yield


async def test_submit_wait_prints_the_commands_output(cli, queue, daemon):
    result = await cli("submit", "--queue", queue, "--wait", "--", "echo", "hi")
    assert result.stdout == "hi\n"
    [submitted] = [line for line in result.stderr.splitlines() if line.startswith("submitted ")]
    assert submitted.endswith(f"to queue {queue}; waiting")


async def test_submit_wait_of_a_failing_command_exits_1_with_its_output(cli, queue, daemon):
    script = "echo partial; echo oops >&2; exit 3"
    result = await cli("submit", "-q", queue, "--wait", "--", "sh", "-c", script, expect=API_ERROR)
    # The command's stdout on stdout, its stderr on stderr, then the error.
    assert result.stdout == "partial\n"
    err = result.stderr.splitlines()
    assert err[-2:] == [
        "oops",
        f"error: invocation {job_id(result)} failed: subprocess.CalledProcessError: "
        "command 'sh' exited with status 3",
    ]
    again = await cli("jobs", "result", job_id(result), expect=API_ERROR)
    assert again.stdout == "partial\n"
    assert again.stderr.startswith("oops\nerror: invocation")
    as_json = await cli("jobs", "result", job_id(result), "-o", "json", expect=API_ERROR)
    body = json.loads(as_json.stdout)
    assert (body["output"], body["stderr"]) == ("partial\n", "oops\n")


def job_id(waited: Result) -> str:
    """The id ``submit --wait`` reports on stderr: ``submitted ID to queue Q; waiting``."""
    [line] = [x for x in waited.stderr.splitlines() if x.startswith("submitted ")]
    return line.split()[1]


def test_a_result_without_stderr_prints_its_combined_output_on_stdout(capsys):
    # Stored before stdout and stderr were kept apart: ``output`` holds both.
    old = ModelResult(id="x", ok=True, exit_code=0, output="out\nerr\n")
    show_result(old, None, "table")
    assert capsys.readouterr() == ("out\nerr\n", "")
    split = ModelResult(id="x", ok=True, exit_code=0, output="out", stderr="err")
    show_result(split, None, "table")
    assert capsys.readouterr() == ("out\n", "err\n")


async def test_submit_wait_of_a_function_prints_its_value_as_json(cli, queue, daemon):
    args = ["--fn", "udf_targets:pair", "--args", '["a"]', "--kwargs", '{"b": {"k": 1}}']
    result = await cli("submit", "--queue", queue, "--wait", *args)
    assert json.loads(result.stdout) == ["a", {"k": 1}]


async def test_submit_wait_of_a_raising_function_shows_the_remote_traceback(cli, queue, daemon):
    args = ["--fn", "udf_targets:fail", "--args", '["boom"]']
    result = await cli(
        "submit", "--queue", queue, "--wait", *args, expect=API_ERROR, remote_traceback=True
    )
    assert result.stdout == ""
    assert 'udf_targets.py", line' in result.stderr
    assert "raise ValueError(message)" in result.stderr
    assert result.stderr.rstrip().endswith("failed: builtins.ValueError: boom")
    # The daemon's own frames (the runner, the @udf wrapper) are folded into one line.
    assert "lakeshore/daemon/" not in result.stderr and "lakeshore/sdk/" not in result.stderr
    assert "Lakeshore frames folded; -o json has them)" in result.stderr


async def test_jobs_result_and_show_after_the_run(cli, queue, daemon, control_plane, js):
    job_id = (await cli("submit", "-q", queue, "--", "echo", "later")).stdout.strip()
    await caught_up(control_plane, js)
    assert (await cli("jobs", "result", job_id, "--wait", "60")).stdout == "later\n"
    body = json.loads((await cli("jobs", "result", job_id, "-o", "json")).stdout)
    assert (body["ok"], body["exit_code"], body["output"]) == (True, 0, "later\n")
    shown = (await cli("jobs", "show", job_id)).stdout
    assert "state:" in shown and "succeeded" in shown
    header, row = shown.split("attempts: 1\n")[1].strip().splitlines()
    assert header.split() == [
        "ATTEMPT", "WORKER", "SEQ", "EPOCH", "STARTED", "ENDED", "OUTCOME", "ERROR"
    ]  # fmt: skip
    assert row.split()[0] == "1" and row.split()[-2:] == ["succeeded", "-"]
    assert row.split()[1] == "cli-daemon"  # the daemon's name, as jobs ls shows it
    [line] = [r for r in (await cli("jobs", "ls")).stdout.splitlines() if r.startswith(job_id)]
    assert line.split()[2:4] == ["succeeded", "1/1"]


async def test_submit_with_code_ships_the_directory_once_and_names_its_digest(
    cli, queue, js, tmp_path: Path
):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "tasks.py").write_text("def double(x):\n    return 2 * x\n")
    for _ in range(2):
        await cli("submit", "-q", queue, "--code", str(project), "--fn", "tasks:double")
    await cli("submit", "-q", queue, "--code", str(project), "--", "cat", "tasks.py")
    msgs = await stored(js)
    digests = {m.code for m in msgs}
    assert len(digests) == 1 and next(iter(digests)).startswith("sha256:")
    info = await js.stream_info(subjects.code_stream("default"), subjects_filter="$O.*.M.>")
    assert len(info.state.subjects or {}) == 1


async def test_submit_with_code_that_is_no_directory_is_refused_before_anything_is_sent(
    cli, queue, js, tmp_path: Path
):
    afile = tmp_path / "file.py"
    afile.write_text("")
    for given, says in ((tmp_path / "nope", "does not exist"), (afile, "is not a directory")):
        result = await cli(
            "submit", "-q", queue, "--code", str(given), "--fn", "tasks:double", expect=API_ERROR
        )
        assert says in result.stderr and "give the directory to ship" in result.stderr
    assert (await js.stream_info(subjects.queue_stream("default", queue))).state.messages == 0
