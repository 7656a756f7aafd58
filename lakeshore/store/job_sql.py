"""The SQL of the job queries (:mod:`.jobs` runs it): a job's state from its events, the
pending backlog of a queue and its ranks, pages of ids, a queue's recent activity.

Constant text only: values are always parameters. Each statement's parameters are listed
where :mod:`.jobs` runs it.
"""

from __future__ import annotations

from lakeshore.store.fences import ACCEPTED, FENCE_COLUMNS, STATE, TERMINAL_TYPES


def jobs(where: str) -> str:
    """A CTE ``jobs``: one row per invocation whose events match ``where``."""
    return f"""WITH agg AS (
        SELECT namespace, invocation_id AS id, any_value(queue) AS queue, {FENCE_COLUMNS},
            arg_min(detail, ts) FILTER (WHERE type = 'submitted') AS submitted_detail,
            min(ts) FILTER (WHERE type = 'submitted') AS submitted_at,
            min(ts) FILTER (WHERE type = 'started') AS started_at,
            max(ts) FILTER (WHERE type IN {TERMINAL_TYPES}) AS finished_at,
            max(attempt) AS attempt,
            arg_max(worker, coalesce(epoch, 0))
                FILTER (WHERE worker IS NOT NULL AND type IN ('claimed', 'started')) AS worker,
            arg_max(detail, ts) FILTER (WHERE type IN ('failed', 'cancelled')) AS failed_detail
        FROM invocation_events WHERE {ACCEPTED} AND {where}
        GROUP BY namespace, invocation_id
    ), jobs AS (
        SELECT *, {STATE} AS state,
            coalesce(TRY_CAST(json_extract_string(submitted_detail, '$.priority') AS INTEGER), 0)
                AS priority
        FROM agg
    )"""


def ids(n: int) -> str:
    return f"namespace = ? AND invocation_id IN ({', '.join('?' * n)})"


def unfinished(extra: str = "") -> str:
    """A CTE ``unfinished``: the fence columns (and ``extra``) of every unfinished
    invocation of a namespace (and queue). The anti-join skips the finished ones, almost
    all of the history, before anything is aggregated; its terminal events are those of
    the same queue (all of an invocation's events carry its queue)."""
    return f"""WITH unfinished AS (
        SELECT invocation_id AS id, {FENCE_COLUMNS}{extra}
        FROM invocation_events ANTI JOIN (
            SELECT invocation_id FROM invocation_events
            WHERE namespace = ? AND queue = coalesce(?, queue) AND type IN {TERMINAL_TYPES}
        ) USING (invocation_id)
        WHERE namespace = ? AND queue = coalesce(?, queue) AND {ACCEPTED}
        GROUP BY invocation_id
    )"""


# The pending invocations of a queue with what ranks them, and only that: ranking a large
# backlog aggregates three columns, not a whole job each.
PENDING = (
    unfinished(""",
        min(ts) FILTER (WHERE type = 'submitted') AS submitted_at,
        arg_min(detail, ts) FILTER (WHERE type = 'submitted') AS submitted_detail""")
    + f""", pending AS (
        SELECT id, submitted_at,
            coalesce(TRY_CAST(json_extract_string(submitted_detail, '$.priority') AS INTEGER), 0)
                AS priority
        FROM unfinished WHERE {STATE} = 'pending'
    )"""
)

JOB_COLUMNS = ("namespace", "id", "queue", "state", "priority", "attempt", "worker",
                "submitted_at", "started_at", "finished_at", "submitted_detail",
                "failed_detail")  # fmt: skip
SELECT = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs"
PAGE = " AND (? IS NULL OR invocation_id < ?) ORDER BY invocation_id DESC LIMIT ?"
# Newest ids first, any state: event rows, of which the caller keeps the distinct ids (a
# top-N of rows is a heap over the scan, where DISTINCT first would hash every id).
NEWEST_ROWS = (
    "SELECT invocation_id FROM invocation_events"
    f" WHERE namespace = ? AND queue = coalesce(?, queue) AND {ACCEPTED}" + PAGE
)
# Newest ids in one terminal state (its event names it), event rows as above.
NEWEST_ROWS_ENDED = (
    "SELECT invocation_id FROM invocation_events"
    " WHERE namespace = ? AND queue = coalesce(?, queue) AND type = ?" + PAGE
)
# Newest ids of failed jobs whose failure names this cause (timed_out, crashed).
NEWEST_ROWS_CAUSE = (
    "SELECT invocation_id FROM invocation_events"
    " WHERE namespace = ? AND queue = coalesce(?, queue) AND type = 'failed'"
    " AND json_extract_string(detail, '$.cause') = ?" + PAGE
)
# Newest ids in one unfinished state: the page's ids only (the page is aggregated after).
UNFINISHED_IDS = (
    unfinished() + f" SELECT id FROM unfinished WHERE {STATE} = ? AND (? IS NULL OR id < ?)"
    " ORDER BY id DESC LIMIT ?"
)
# Ahead of a pending job: pending jobs of its queue of higher priority, then older ones.
# Every pending job's rank leaves the database when the backlog has at most ``?`` of them
# (they are kept, :mod:`.ranks`), else only the asked ids'; each row says the backlog's size.
RANKS = (
    PENDING
    + """ SELECT id, position, backlog FROM (
        SELECT id, row_number() OVER (ORDER BY priority DESC, submitted_at NULLS LAST, id) - 1
            AS position, count(*) OVER () AS backlog
        FROM pending
    ) WHERE backlog <= ? OR id = ANY(?::VARCHAR[])"""
)
OLDEST_PENDING = PENDING + " SELECT min(submitted_at) FROM pending"
# What the pending invocations of a queue ask of GPUs: (gpus, gpu_type, how many), those
# asking for at least one (the controller's demand in resources).
GPU_DEMAND = (
    unfinished(""",
        arg_min(detail, ts) FILTER (WHERE type = 'submitted') AS submitted_detail""")
    + f""", asks AS (
        SELECT TRY_CAST(json_extract_string(submitted_detail, '$.resources.gpus') AS INTEGER)
                AS gpus,
            json_extract_string(submitted_detail, '$.resources.gpu_type') AS gpu_type
        FROM unfinished WHERE {STATE} = 'pending'
    )
    SELECT gpus, gpu_type, count(*) FROM asks WHERE gpus > 0
    GROUP BY gpus, gpu_type ORDER BY gpus, gpu_type"""
)
EVENTS = (
    "SELECT type, epoch, attempt, worker, ts, detail FROM invocation_events"
    " WHERE namespace = ? AND invocation_id = ? ORDER BY ts"
)

# The retries of a job: the newer ids whose submit names it.
RETRIES = """SELECT invocation_id FROM invocation_events
    WHERE namespace = ? AND type = 'submitted' AND invocation_id > ?
        AND json_extract_string(detail, '$.retry_of') = ?
    GROUP BY invocation_id ORDER BY invocation_id"""
# The states of one batch's invocations: the batch id and up, whose submit names it.
BATCH_STATES = (
    jobs(
        """namespace = ? AND invocation_id IN (
        SELECT invocation_id FROM invocation_events
        WHERE namespace = ? AND type = 'submitted' AND invocation_id >= ?
            AND json_extract_string(detail, '$.batch') = ?)"""
    )
    # A failed job counts under its cause when it has one (timed_out, crashed).
    + """ SELECT s, count(*) FROM (
        SELECT CASE WHEN state = 'failed'
            THEN coalesce(json_extract_string(failed_detail, '$.cause'), state)
            ELSE state END AS s
        FROM jobs) GROUP BY s ORDER BY s"""
)

WINDOW_COUNTS = """SELECT
    count(DISTINCT invocation_id) FILTER (WHERE type = 'submitted'),
    count(*) FILTER (WHERE type = 'succeeded'),
    count(*) FILTER (WHERE type = 'failed'),
    count(DISTINCT invocation_id) FILTER (WHERE type = 'cancelled')
    FROM invocation_events WHERE namespace = ? AND queue = ? AND ts >= ?"""
# The least id of the invocations with a ``started`` event in the window.
FIRST_STARTED = """SELECT min(invocation_id) FROM invocation_events
    WHERE namespace = ? AND queue = ? AND type = 'started' AND ts >= ?"""
# Wait = submitted → first started, for the invocations whose first start is in the window
# (their ids are at least the one of FIRST_STARTED). An invocation whose first start is in
# the window has a start there: no semi-join with the window's starts is needed.
WAITS = """SELECT quantile_cont(epoch(first_started - submitted_at), [0.5, 0.95]) FROM (
        SELECT min(ts) FILTER (WHERE type = 'started') AS first_started,
            min(ts) FILTER (WHERE type = 'submitted') AS submitted_at
        FROM invocation_events
        WHERE namespace = ? AND queue = ? AND type IN ('started', 'submitted')
            AND invocation_id >= ?
        GROUP BY invocation_id
    ) WHERE first_started >= ? AND submitted_at IS NOT NULL"""
