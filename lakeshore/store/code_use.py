"""How an org's jobs use its code snapshots (spec/code.md): ``lakeshore code ls`` and the
snapshots' retention read it from the jobs' history.

A job uses the snapshot its ``submitted`` event names (``detail.code``); its first and last
accepted events are its use, and it keeps its snapshot while it has no terminal event.
"""

from __future__ import annotations

from typing import Any

import duckdb

from lakeshore.model import CodeUse
from lakeshore.store.fences import ACCEPTED, TERMINAL_TYPES

CODE_USE = f"""
WITH shipped AS (
    SELECT namespace, invocation_id, json_extract_string(detail, '$.code') AS code
    FROM invocation_events
    WHERE type = 'submitted' AND list_contains(?, namespace)
        AND json_extract_string(detail, '$.code') IS NOT NULL
), jobs AS (
    SELECT any_value(s.code) AS code, min(e.ts) AS first_ts, max(e.ts) AS last_ts,
        bool_or(e.type IN {TERMINAL_TYPES}) AS finished
    FROM invocation_events e JOIN shipped s USING (namespace, invocation_id)
    WHERE {ACCEPTED}
    GROUP BY e.namespace, e.invocation_id
)
SELECT code, count(*), count(*) FILTER (WHERE NOT finished), min(first_ts), max(last_ts)
FROM jobs GROUP BY code
"""


def code_use(con: duckdb.DuckDBPyConnection, namespaces: list[str]) -> dict[str, CodeUse]:
    """Each snapshot the jobs of ``namespaces`` name, and how they use it."""
    rows: list[Any] = con.execute(CODE_USE, [namespaces]).fetchall()
    return {
        code: CodeUse(jobs=jobs, unfinished=unfinished, first_used=first, last_used=last)
        for code, jobs, unfinished, first, last in rows
    }
