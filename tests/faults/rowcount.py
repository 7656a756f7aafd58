"""Row counts of every table of a running plane's store, to prove that refused requests
changed nothing (rows 15, 16). Reads through the store's own connection and thread."""

from __future__ import annotations

from typing import Any


async def row_counts(store: Any) -> dict[str, int]:
    def count(con: Any) -> dict[str, int]:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "ORDER BY table_name"
            ).fetchall()
        ]
        return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}

    return await store._run(count)
