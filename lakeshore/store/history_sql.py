"""The SQL of history as data (:mod:`.history` runs it): a queue's points per interval,
the per-minute aggregates that outlive compacted rows, and the Parquet export.

Constant text only: values are always parameters. An interval is ``time_bucket`` of its
width in seconds, aligned on the Unix epoch (so ``1m`` buckets start on whole minutes).
"""

from __future__ import annotations

from lakeshore.store.fences import ACCEPTED, TERMINAL_TYPES

_BUCKET = "time_bucket(to_seconds(?::DOUBLE), {col}, TIMESTAMPTZ '1970-01-01 00:00:00+00')"


def _times(table: str, where: str) -> str:
    """One row per invocation: when it was submitted, first and last started, ended."""
    return f"""SELECT namespace, invocation_id,
        min(ts) FILTER (WHERE type = 'submitted') AS submitted_at,
        min(ts) FILTER (WHERE type = 'started') AS first_started,
        max(ts) FILTER (WHERE type = 'started') AS last_started,
        max(ts) FILTER (WHERE type IN ('succeeded', 'failed')) AS ended
    FROM {table} WHERE {ACCEPTED} AND type IN ('submitted', 'started', 'succeeded',
        'failed') AND {where}
    GROUP BY namespace, invocation_id"""


# How pending moves with each event: up on a submit or a retry, down on a start, a drop
# or the control plane's cancel of a pending invocation (the one without an epoch).
_PENDING_STEP = """CASE WHEN type IN ('submitted', 'retrying') THEN 1
    WHEN type IN ('started', 'dropped') OR (type = 'cancelled' AND epoch IS NULL) THEN -1
    ELSE 0 END"""

# How running moves: up on a start, down when a started run ends (its outcome, a retry,
# an interrupt, its daemon lost, a cancel of it). A poison pill's end ran nothing.
_RUNNING_STEP = """CASE WHEN type = 'started' THEN 1
    WHEN type IN ('succeeded', 'failed', 'retrying', 'cancelled') AND epoch IS NOT NULL
        AND coalesce(json_extract_string(detail, '$.reason'), '') <> 'lost_too_often' THEN -1
    ELSE 0 END"""

# The counts per interval, how much pending and running moved in it, and how far pending
# rose within it above its level at the interval's start (at least 0): a burst that comes
# and goes between two intervals' ends still shows. ``level`` runs over the whole window
# (one sort, not one per interval; the events of one instant move it together); an
# interval's start is the sum of the steps before it. Params: every_s, namespace, queue,
# since, until.
COUNTS = f"""SELECT b,
        count(*) FILTER (WHERE type = 'submitted'),
        count(*) FILTER (WHERE type = 'started'),
        count(*) FILTER (WHERE type = 'succeeded'),
        count(*) FILTER (WHERE type = 'failed'),
        sum(step), sum(run_step),
        greatest(0, max(level) - (sum(sum(step)) OVER (ORDER BY b) - sum(step)))
    FROM (
        SELECT {_BUCKET.format(col="ts")} AS b, type, {_PENDING_STEP} AS step,
            {_RUNNING_STEP} AS run_step,
            sum({_PENDING_STEP}) OVER (ORDER BY ts) AS level
        FROM invocation_events
        WHERE namespace = ? AND queue = ? AND ts >= ? AND ts < ? AND {ACCEPTED}
    )
    GROUP BY b"""

# Waits (submitted → first started) by the interval of the first start, runs (last
# started → succeeded/failed) by the interval of the end; each with how many it measured.
# The invocations measured are those started or ended since ``since`` (their submitted
# event may be older). Params: namespace, queue, namespace, queue, since, every_s, since,
# until, every_s, since, until.
_IN_WINDOW = """namespace = ? AND queue = ? AND invocation_id IN (
    SELECT invocation_id FROM invocation_events WHERE namespace = ? AND queue = ?
        AND ts >= ? AND type IN ('started', 'succeeded', 'failed'))"""
DURATIONS = f"""WITH t AS ({_times("invocation_events", _IN_WINDOW)})
    SELECT 'wait' AS kind, {_BUCKET.format(col="first_started")} AS b,
        quantile_cont(epoch(first_started - submitted_at), [0.5, 0.95]), count(*)
    FROM t WHERE first_started >= ? AND first_started < ? AND submitted_at IS NOT NULL
    GROUP BY b
    UNION ALL
    SELECT 'run', {_BUCKET.format(col="ended")} AS b,
        quantile_cont(epoch(ended - last_started), [0.5, 0.95]), count(*)
    FROM t WHERE ended >= ? AND ended < ? AND last_started IS NOT NULL
    GROUP BY b"""

# The compacted minutes, merged into intervals: counts add, a quantile is the mean of the
# minutes' quantiles weighted by how many each measured.
# Params: every_s, namespace, queue, since, until.
AGGREGATES = f"""SELECT {_BUCKET.format(col="minute")} AS b,
        sum(submitted), sum(started), sum(succeeded), sum(failed),
        sum(wait_p50_s * wait_n), sum(wait_p95_s * wait_n), sum(wait_n),
        sum(run_p50_s * run_n), sum(run_n), sum(pending_change), sum(running_change)
    FROM history_minutes
    WHERE namespace = ? AND queue = ? AND minute >= ? AND minute < ?
    GROUP BY b"""

# The invocations compaction removes: finished (a terminal event), every event older
# than the cut-off. Params: cutoff.
DOOMED = f"""CREATE OR REPLACE TEMP TABLE doomed AS
    SELECT namespace, invocation_id FROM invocation_events
    GROUP BY namespace, invocation_id
    HAVING bool_or(type IN {TERMINAL_TYPES}) AND max(ts) < ?"""

_DOOMED_ROWS = "invocation_events SEMI JOIN doomed USING (namespace, invocation_id)"

# Per-minute aggregates of the doomed invocations, inserted before their rows go.
COMPACT = f"""INSERT INTO history_minutes
    WITH ev AS (SELECT * FROM {_DOOMED_ROWS} WHERE {ACCEPTED}),
    t AS ({_times("ev", "true")}),
    counts AS (
        SELECT namespace, queue, date_trunc('minute', ts) AS minute,
            count(*) FILTER (WHERE type = 'submitted') AS submitted,
            count(*) FILTER (WHERE type = 'started') AS started,
            count(*) FILTER (WHERE type = 'succeeded') AS succeeded,
            count(*) FILTER (WHERE type = 'failed') AS failed,
            sum({_PENDING_STEP}) AS pending_change, sum({_RUNNING_STEP}) AS running_change
        FROM ev GROUP BY ALL
    ),
    queues AS (SELECT DISTINCT namespace, invocation_id, queue FROM ev),
    waits AS (
        SELECT namespace, queue, date_trunc('minute', first_started) AS minute,
            quantile_cont(epoch(first_started - submitted_at), 0.5) AS wait_p50_s,
            quantile_cont(epoch(first_started - submitted_at), 0.95) AS wait_p95_s,
            count(*) AS wait_n
        FROM t JOIN queues USING (namespace, invocation_id)
        WHERE first_started IS NOT NULL AND submitted_at IS NOT NULL GROUP BY ALL
    ),
    runs AS (
        SELECT namespace, queue, date_trunc('minute', ended) AS minute,
            quantile_cont(epoch(ended - last_started), 0.5) AS run_p50_s, count(*) AS run_n
        FROM t JOIN queues USING (namespace, invocation_id)
        WHERE ended IS NOT NULL AND last_started IS NOT NULL GROUP BY ALL
    )
    SELECT namespace, queue, minute, coalesce(submitted, 0), coalesce(started, 0),
        coalesce(succeeded, 0), coalesce(failed, 0), wait_p50_s, wait_p95_s,
        coalesce(wait_n, 0), run_p50_s, coalesce(run_n, 0), coalesce(pending_change, 0),
        coalesce(running_change, 0)
    FROM counts FULL JOIN waits USING (namespace, queue, minute)
        FULL JOIN runs USING (namespace, queue, minute)"""

DELETE_DOOMED = (
    "DELETE FROM invocation_events USING doomed"
    " WHERE invocation_events.namespace = doomed.namespace"
    " AND invocation_events.invocation_id = doomed.invocation_id"
)

# Params: cutoff.
DELETE_MINUTES = "DELETE FROM history_minutes WHERE minute < ?"

# Every column of a namespace's events (and queue's) since a time, oldest first.
# Params: namespace, queue (or NULL), since.
EXPORT = """COPY (
        SELECT namespace, queue, invocation_id, ts, type, attempt, worker, epoch, detail
        FROM invocation_events
        WHERE namespace = ? AND queue = coalesce(?, queue) AND ts >= ?
        ORDER BY ts, invocation_id
    ) TO '{path}' (FORMAT parquet)"""
