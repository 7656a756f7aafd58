"""The Recorder's queries: fences of invocations, and which event messages were appended.

A fence (:class:`lakeshore.fencing.Fence`) is derived from an invocation's accepted (not
``stale``) events with the SQL fragments below, which are generated from the fencing
tables, so the store and the Recorder's memory cannot disagree. :mod:`.jobs` derives the
current state of a job from the same fragments (:data:`FENCE_COLUMNS`, not the claims).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import duckdb

from lakeshore import fencing
from lakeshore.fencing import Fence, Key
from lakeshore.model import EventType, InvocationState
from lakeshore.store import _rows, images

Con = duckdb.DuckDBPyConnection

#: Largest IN-list of one lookup; below DuckDB's index-scan limit (2,048 values).
LOOKUP_CHUNK = 500


def _in(types: Iterable[EventType]) -> str:
    # Constant enum values only, never input: safe to inline.
    return "(" + ", ".join(f"'{t.value}'" for t in sorted(types)) + ")"


TERMINAL_TYPES = _in(fencing.TERMINAL)
ACCEPTED = "type <> 'stale'"
_RANK = "CASE type " + " ".join(f"WHEN '{t.value}' THEN {r}" for t, r in fencing.RANK.items())
_RUNNING = ", ".join(
    str(r) for r, s in fencing.STATE_OF_RANK.items() if s is InvocationState.RUNNING
)
#: Aggregates over one invocation's accepted events: ``started_epoch, top, terminal``.
FENCE_COLUMNS = f"""
    coalesce(max(coalesce(epoch, 0)) FILTER (WHERE type IN {_in(fencing.RAISES_EPOCH)}), 0)
        AS started_epoch,
    coalesce(max(coalesce(epoch, 0) * {fencing.RANK_BASE} + {_RANK} END)
        FILTER (WHERE type IN {_in(fencing.RANK)}), -1) AS top,
    any_value(type) FILTER (WHERE type IN {TERMINAL_TYPES}) AS terminal"""
#: The claims of one invocation's accepted events: every distinct ``(epoch, worker)`` struct
#: (a list, NULL when none); :func:`fencing.kept_claims` keeps those a fence holds. Apart from
#: FENCE_COLUMNS so that the job queries, which need only the state, do not aggregate it.
CLAIMS = f"""list(DISTINCT struct_pack(epoch := coalesce(epoch, 0), worker := worker))
        FILTER (WHERE type IN {_in(fencing.CLAIMING)} AND worker IS NOT NULL) AS claims"""
#: Whether one invocation's accepted events include its ``submitted`` event.
SUBMITTED = f"bool_or(type = '{EventType.SUBMITTED.value}') AS submitted"
#: The state of a row with :data:`FENCE_COLUMNS` (a terminal type names its state).
STATE = f"""CASE WHEN terminal IS NOT NULL THEN terminal
    WHEN top >= 0 AND top % {fencing.RANK_BASE} IN ({_RUNNING}) THEN 'running'
    ELSE 'pending' END"""

_FENCES = f"""SELECT namespace, invocation_id, {FENCE_COLUMNS}, {CLAIMS}, {SUBMITTED}
    FROM invocation_events WHERE {ACCEPTED} AND {{where}}
    GROUP BY namespace, invocation_id"""
# The anti-join drops finished invocations before aggregating (most of the history).
_UNFINISHED = f"""SELECT e.namespace, e.invocation_id, {FENCE_COLUMNS}, {CLAIMS}, {SUBMITTED}
    FROM invocation_events e ANTI JOIN (
        SELECT namespace, invocation_id FROM invocation_events WHERE type IN {TERMINAL_TYPES}
    ) USING (namespace, invocation_id)
    WHERE {ACCEPTED} GROUP BY e.namespace, e.invocation_id"""


def _fence(row: tuple[Any, ...]) -> Fence:
    started, top, terminal, claims, submitted = row[-5:]
    kept = fencing.kept_claims(((c["epoch"], c["worker"]) for c in claims or ()), int(started))
    state = InvocationState(terminal) if terminal else None
    return Fence(int(started), int(top), state, kept, bool(submitted))


def fences(con: Con, ids: Sequence[str]) -> dict[Key, Fence]:
    """The fences of the invocations with these ids (absent: never recorded)."""
    out: dict[Key, Fence] = {}
    for start in range(0, len(ids), LOOKUP_CHUNK):
        chunk = list(ids[start : start + LOOKUP_CHUNK])
        # An explicit IN-list of parameters is what DuckDB answers from the index.
        sql = _FENCES.format(where=f"invocation_id IN ({', '.join('?' * len(chunk))})")
        for row in con.execute(sql, chunk).fetchall():
            out[(row[0], row[1])] = _fence(row)
    return out


def unfinished_fences(con: Con) -> dict[Key, Fence]:
    """The fences of every invocation without an accepted terminal event."""
    return {(row[0], row[1]): _fence(row) for row in con.execute(_UNFINISHED).fetchall()}


def max_invocation_id(con: Con) -> str | None:
    """The greatest invocation id ever recorded: every greater id is new."""
    return _rows.scalar(con, "SELECT max(invocation_id) FROM invocation_events")


def recorded_batches(con: Con, seqs: Sequence[int]) -> set[int]:
    """Which of these event-message sequences were already appended."""
    sql = "SELECT DISTINCT seq FROM recorded_batches WHERE seq = ANY(?::BIGINT[])"
    return {row[0] for row in con.execute(sql, [list(seqs)]).fetchall()}


def events_position(con: Con) -> int | None:
    """The last events-stream sequence appended to this file (``None``: never).

    An append records its sequences in ``recorded_batches`` only; the position is the
    greatest of them, folded into ``log_positions`` when they are pruned.
    """
    sql = "SELECT (SELECT seq FROM log_positions WHERE log = ?), max(seq) FROM recorded_batches"
    known = [seq for seq in con.execute(sql, [images.EVENTS_LOG]).fetchone() if seq is not None]
    return max(known) if known else None


def prune_recorded_batches(con: Con, ack_floor: int, last_seq: int) -> None:
    """Forget sequences that cannot be redelivered any more (acked, or of a lost stream),
    keeping the position they make (in the caller's transaction)."""
    done = events_position(con)
    if done is not None:
        images.set_position(con, images.EVENTS_LOG, done)
    con.execute("DELETE FROM recorded_batches WHERE seq <= ? OR seq > ?", [ack_floor, last_seq])
