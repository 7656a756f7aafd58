"""Versioned schema migrations of the DuckDB store.

A migration is ``(version, [statements])``. Versions start at 1 and increase by one. Each
missing migration runs in its own transaction together with the ``schema_version`` row that
records it, so a crash leaves the file at the last fully applied version. Migrations are
never edited once released: a change of schema is a new migration appended to
:data:`MIGRATIONS`.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from lakeshore.errors import SchemaTooNew

Migration = tuple[int, list[str]]

_TS = "TIMESTAMPTZ NOT NULL"

#: Every migration the code knows, in order.
MIGRATIONS: list[Migration] = [
    (
        1,
        [
            f"""CREATE TABLE namespaces (
                name VARCHAR PRIMARY KEY,
                org VARCHAR NOT NULL,
                created_at {_TS}
            )""",
            f"""CREATE TABLE tokens (
                id VARCHAR PRIMARY KEY,
                hash VARCHAR NOT NULL UNIQUE,
                namespace VARCHAR,
                description VARCHAR NOT NULL,
                admin BOOLEAN NOT NULL,
                created_at {_TS},
                revoked_at TIMESTAMPTZ
            )""",
            f"""CREATE TABLE queues (
                namespace VARCHAR NOT NULL,
                name VARCHAR NOT NULL,
                kind VARCHAR NOT NULL,
                state VARCHAR NOT NULL,
                description VARCHAR NOT NULL,
                max_depth INTEGER,
                on_full VARCHAR NOT NULL,
                elasticity VARCHAR NOT NULL,
                created_at {_TS},
                updated_at {_TS},
                PRIMARY KEY (namespace, name)
            )""",
            f"""CREATE TABLE workers (
                id VARCHAR PRIMARY KEY,
                namespace VARCHAR NOT NULL,
                name VARCHAR NOT NULL,
                queues VARCHAR NOT NULL,
                labels VARCHAR NOT NULL,
                provider VARCHAR NOT NULL,
                managed BOOLEAN NOT NULL,
                status VARCHAR NOT NULL,
                current VARCHAR,
                last_heartbeat TIMESTAMPTZ,
                started_at {_TS},
                UNIQUE (namespace, name)
            )""",
            "CREATE SEQUENCE queue_events_id_seq START 1",
            f"""CREATE TABLE queue_events (
                id BIGINT PRIMARY KEY DEFAULT nextval('queue_events_id_seq'),
                namespace VARCHAR NOT NULL,
                queue VARCHAR NOT NULL,
                ts {_TS},
                type VARCHAR NOT NULL,
                actor VARCHAR,
                detail VARCHAR
            )""",
            # Append-only and written in bulk: no key and no index, since every ART index
            # would be maintained row by row on the ingest path.
            f"""CREATE TABLE invocation_events (
                namespace VARCHAR NOT NULL,
                queue VARCHAR NOT NULL,
                invocation_id VARCHAR NOT NULL,
                ts {_TS},
                type VARCHAR NOT NULL,
                attempt INTEGER NOT NULL,
                worker VARCHAR,
                epoch BIGINT,
                detail VARCHAR
            )""",
        ],
    ),
    (
        2,
        [
            # Point lookups (a job's detail, the Recorder's fence misses) would otherwise
            # scan the whole history. Cost on bulk appends: none measurable with
            # time-ordered ids, about 10 % with random ones (bench/store_ingest.py).
            "CREATE INDEX invocation_events_id ON invocation_events (invocation_id)",
            # Stream sequences of the event messages appended but perhaps not yet acked,
            # written in the append's transaction, so a redelivered message is never
            # recorded twice. Pruned below the consumer's ack floor; no key, so a stale
            # row can never make an append fail.
            "CREATE TABLE recorded_batches (seq BIGINT NOT NULL)",
        ],
    ),
    (
        3,
        [
            # The built-in ``local`` provider of every namespace is not a row.
            f"""CREATE TABLE providers (
                namespace VARCHAR NOT NULL,
                name VARCHAR NOT NULL,
                kind VARCHAR NOT NULL,
                config VARCHAR NOT NULL,
                created_at {_TS},
                PRIMARY KEY (namespace, name)
            )""",
        ],
    ),
    (
        4,
        [
            # Idempotency keys outlive JetStream's duplicate window and every restart: a
            # retried key answers its first invocation's id for ``idempotency_ttl_s``.
            f"""CREATE TABLE idempotency_keys (
                namespace VARCHAR NOT NULL,
                queue VARCHAR NOT NULL,
                key VARCHAR NOT NULL,
                invocation_id VARCHAR NOT NULL,
                digest VARCHAR NOT NULL,
                created_at {_TS},
                PRIMARY KEY (namespace, queue, key)
            )""",
        ],
    ),
    (
        5,
        [
            # Labels on queues and providers (a compose file marks what it created); where
            # a provider runs each daemon, so that it can stop it after a restart.
            "ALTER TABLE queues ADD COLUMN labels VARCHAR DEFAULT '{}'",
            "ALTER TABLE providers ADD COLUMN labels VARCHAR DEFAULT '{}'",
            "ALTER TABLE workers ADD COLUMN placement VARCHAR DEFAULT '{}'",
        ],
    ),
    (
        6,
        [
            # Per-minute aggregates of invocations whose events were compacted away (the
            # history's plots outlive the raw rows). No key: a minute may get a row from
            # each compaction, and readers sum them.
            f"""CREATE TABLE history_minutes (
                namespace VARCHAR NOT NULL,
                queue VARCHAR NOT NULL,
                minute {_TS},
                submitted BIGINT NOT NULL,
                started BIGINT NOT NULL,
                succeeded BIGINT NOT NULL,
                failed BIGINT NOT NULL,
                wait_p50_s DOUBLE,
                wait_p95_s DOUBLE,
                wait_n BIGINT NOT NULL,
                run_p50_s DOUBLE,
                run_n BIGINT NOT NULL
            )""",
        ],
    ),
    (
        7,
        [
            # How far this file has applied each log it projects: the state stream (row
            # images) and the events stream (the Recorder's). A fresh file starts both at 0;
            # a file from before has its events position unknown (its Recorder's consumer
            # knows it) and its rows not yet in the state stream (the leader seeds them).
            "CREATE TABLE log_positions (log VARCHAR PRIMARY KEY, seq BIGINT NOT NULL)",
            "INSERT INTO log_positions SELECT 'events', 0 "
            "WHERE NOT EXISTS (SELECT 1 FROM invocation_events)",
        ],
    ),
    (
        8,
        [
            # How much the pending and running counts moved within each compacted minute
            # (retries and cancels included), so a chart can be derived from the rows alone.
            # Minutes compacted before this migration moved by 0 as far as they tell.
            "ALTER TABLE history_minutes ADD COLUMN pending_change BIGINT DEFAULT 0",
            "ALTER TABLE history_minutes ADD COLUMN running_change BIGINT DEFAULT 0",
        ],
    ),
    (
        9,
        [
            # The code snapshot a queue's invocations run in when they name none.
            "ALTER TABLE queues ADD COLUMN code VARCHAR",
        ],
    ),
    (
        10,
        [
            # What each daemon has and has free (spec/resources.md), and what it runs now.
            "ALTER TABLE workers ADD COLUMN resources VARCHAR",
            "ALTER TABLE workers ADD COLUMN running VARCHAR DEFAULT '[]'",
            "ALTER TABLE workers ADD COLUMN launched_with VARCHAR",
            # What a queue's invocations get when they name none (its resources).
            "ALTER TABLE queues ADD COLUMN defaults VARCHAR",
        ],
    ),
]


def check_migrations(migrations: Sequence[Migration]) -> None:
    """Check that versions run 1, 2, 3, … without gaps or repeats.

    Raises:
        ValueError: the list is malformed (a bug in the code, not in the file).
    """
    versions = [v for v, _ in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migration versions must be 1..n in order, got {versions}")


def migrate(
    con: duckdb.DuckDBPyConnection, where: str, migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Bring the connected file up to the newest known schema.

    Args:
        con: an open connection, used only from the calling thread.
        where: how to name the file in errors (its path).
        migrations: the known migrations (tests pass a longer or shorter list).

    Returns:
        The schema version of the file afterwards.

    Raises:
        SchemaTooNew: the file's version is above every known migration; nothing is changed.
    """
    check_migrations(migrations)
    con.execute(
        f"CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at {_TS})"
    )
    current = schema_version(con)
    known = len(migrations)
    if current > known:
        raise SchemaTooNew(where, current, known)
    for version, statements in migrations[current:]:
        con.execute("BEGIN TRANSACTION")
        try:
            for statement in statements:
                con.execute(statement)
            con.execute("INSERT INTO schema_version VALUES (?, now())", [version])
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    return max(current, known)


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The highest applied migration (0 for a file that has none)."""
    row = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    assert row is not None
    return int(row[0])
