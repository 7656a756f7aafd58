"""History as data against a real control plane and a real daemon: ``lakeshore stats`` per
interval, the history route's refusals, the Parquet export read back with DuckDB, and
compaction that keeps the points after the raw rows are gone."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import duckdb
import pytest
from clirunner import Invoke, cli_for
from polling import eventually
from support import daemon_process

from lakeshore.actors.compaction import Compact
from lakeshore.actors.recorder import WaitRecorded
from lakeshore.bus import subjects
from lakeshore.cli import output
from lakeshore.cli.exits import USAGE
from lakeshore.sdk import Client

Q = "/v1/namespaces/default/queues"
QUEUE = "hist"
SECRET = "s3cret-value-never-exported"


async def run_jobs(handle, cli: Invoke, js, tmp_path: Path) -> None:
    """Two succeeded jobs and one failed, run by a real ``lakeshore daemon run``, recorded."""
    async with handle.client() as api:
        assert (await api.post(Q, {"name": QUEUE}))[0] == 201
    log = tmp_path / "daemon.log"
    async with daemon_process(handle, QUEUE, "hist-daemon", tmp_path, log):
        for _ in range(2):
            await cli("submit", "-q", QUEUE, "--env", f"SECRET={SECRET}", "--wait", "--", "true")
        await cli("submit", "-q", QUEUE, "--wait", "--", "sh", "-c", "exit 3", expect=1)
    last = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    async with asyncio.timeout(10):
        await (await handle.plane.parts.recorder.ask(WaitRecorded(last)))


@pytest.fixture
async def finished(control_plane, cli, js, tmp_path: Path) -> None:
    await run_jobs(control_plane, cli, js, tmp_path)


def _totals(points: list[dict]) -> dict[str, int]:
    keys = ("submitted", "started", "succeeded", "failed")
    return {k: sum(p[k] for p in points) for k in keys}


async def test_stats_counts_each_interval_of_real_runs(cli, finished) -> None:
    body = json.loads(
        (await cli("stats", QUEUE, "--since", "1h", "--every", "1m", "-o", "json")).stdout
    )
    assert (body["queue"], body["namespace"], body["every_s"]) == (QUEUE, "default", 60.0)
    assert 60 <= len(body["points"]) <= 62
    assert _totals(body["points"]) == {"submitted": 3, "started": 3, "succeeded": 2, "failed": 1}
    busy = [p for p in body["points"] if p["started"]]
    assert all(p["wait_p50_s"] is not None and p["run_p50_s"] is not None for p in busy)
    table = (await cli("stats", QUEUE, "--since", "5m", "--every", "1m")).stdout.splitlines()
    assert table[0].split() == [
        "TIME", "SUBMITTED", "STARTED", "SUCCEEDED", "FAILED", "WAIT_P50", "WAIT_P95",
    ]  # fmt: skip
    assert sum(int(row.split()[4]) for row in table[1:]) == 2  # SUCCEEDED (TIME is two words)


#: A duration as the CLI prints one: ``12.3ms``, ``1.75s``, ``42s``, ``2m03s``, ``1h05m``.
HUMAN = re.compile(r"\d+(\.\d+)?(ms|s)|\d+[mhd]\d\d[smh]")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, None), (0.0, "0s"), (0.000001, "0.001ms"), (0.0123456, "12.3ms"),
        (0.9999, "1s"), (1.7521550000000001, "1.75s"), (9.9999, "10s"), (42.7, "42s"),
        (123.4, "2m03s"), (3900, "1h05m"), (273600, "3d04h"), (-0.5, "0s"),
    ],
)  # fmt: skip
def test_durations_are_shown_in_human_units(seconds, shown) -> None:
    assert output.duration(seconds) == shown


async def test_queue_stats_are_one_snapshot_with_times_people_read(cli, finished) -> None:
    body = json.loads((await cli("queues", "stats", QUEUE, "-o", "json")).stdout)
    counts = ("submitted", "succeeded", "failed", "cancelled", "pending", "running", "busy")
    assert {k: body[k] for k in counts} == {
        "submitted": 3, "succeeded": 2, "failed": 1, "cancelled": 0, "pending": 0,
        "running": 0, "busy": 0,
    }  # fmt: skip
    assert body["utilization"] == 0.0
    for key in ("wait_p50_s", "wait_p95_s"):
        assert body[key] == round(body[key], 6), (key, body[key])
    shown = dict(
        line.split(":", 1) for line in (await cli("queues", "stats", QUEUE)).stdout.splitlines()
    )
    assert shown["cancelled"].strip() == "0" and shown["oldest_pending_age"].strip() == "-"
    for key in ("wait_p50", "wait_p95"):
        assert HUMAN.fullmatch(shown[key].strip()), (key, shown[key])
    table = (await cli("stats", QUEUE, "--since", "5m", "--every", "1m")).stdout.splitlines()
    waits = [row.split()[-2:] for row in table[1:] if row.split()[-1] != "-"]
    assert waits and all(HUMAN.fullmatch(w) for row in waits for w in row), waits


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--every", "0s"), "Invalid value for '--every'"),
        (("--every", "fast"), "like 30s, 5m, 1h or 2d"),
        (("--since", "-1h"), "Invalid value for '--since'"),
    ],
)
async def test_stats_bad_durations_are_usage_errors(cli, args, needle) -> None:
    result = await cli("stats", "default", *args, expect=USAGE)
    assert needle in result.stderr


async def test_history_export_writes_parquet_without_env_values(cli, finished, tmp_path) -> None:
    out = tmp_path / "runs.parquet"
    result = await cli("history", "export", "--since", "1d", "--queue", QUEUE, "--to", str(out))
    rows = duckdb.sql(f"SELECT * FROM '{out}'")
    assert rows.columns == [
        "namespace", "queue", "invocation_id", "ts", "type", "attempt", "worker", "epoch",
        "detail",
    ]  # fmt: skip
    count = len(rows.fetchall())
    assert result.stdout.startswith(f"wrote {count} row(s), {out.stat().st_size} bytes")
    kinds = dict(duckdb.sql(f"SELECT type, count(*) FROM '{out}' GROUP BY type").fetchall())
    assert (kinds["submitted"], kinds["succeeded"], kinds["failed"]) == (3, 2, 1)
    assert SECRET.encode() not in out.read_bytes()
    other = tmp_path / "other.parquet"
    await cli("history", "export", "--queue", "default", "--to", str(other))
    assert duckdb.sql(f"SELECT count(*) FROM '{other}'").fetchall() == [(0,)]


async def test_compaction_keeps_the_points_after_the_rows_are_gone(
    cli, control_plane, finished, tmp_path
) -> None:
    def stats() -> list[dict]:
        # pending_rise is read from the raw events only (0 once they are compacted).
        points = json.loads(result.stdout)["points"]
        return [{k: v for k, v in p.items() if k != "pending_rise"} for p in points]

    result = await cli("stats", QUEUE, "--since", "10m", "-o", "json")
    before = stats()
    done = await control_plane.plane.parts.recorder.ask(Compact(raw_keep_s=0.0))
    assert done.invocations == 3 and done.rows > 0 and done.minutes >= 1
    out = tmp_path / "after.parquet"
    await cli("history", "export", "--queue", QUEUE, "--to", str(out))
    assert duckdb.sql(f"SELECT count(*) FROM '{out}'").fetchall() == [(0,)]
    result = await cli("stats", QUEUE, "--since", "10m", "-o", "json")
    after = stats()
    busy = [(b, a) for b, a in zip(before, after, strict=False) if b["started"]]
    assert busy and all(b == pytest.approx(a) for b, a in busy)
    assert _totals(after) == {"submitted": 3, "started": 3, "succeeded": 2, "failed": 1}


async def test_the_server_compacts_by_its_retention_settings(
    plane_factory, isolated, js, tmp_path
) -> None:
    handle = await plane_factory(history_retention_days=1e-9, history_compact_every_s=0.05)
    cli = cli_for(handle)
    await run_jobs(handle, cli, js, tmp_path)
    out = tmp_path / "left.parquet"

    async def rows_left() -> int:
        async with Client(handle.api, handle.admin_token) as client:
            rows, _ = await client.history_export(out, "1d", QUEUE)
        return rows

    await eventually(rows_left, until=lambda n: n == 0, timeout_s=10, what="compaction")
    result = await cli("stats", QUEUE, "--since", "10m", "-o", "json")
    assert _totals(json.loads(result.stdout)["points"])["succeeded"] == 2
