"""The ``store`` fixture of the contract tests: every row-store implementation in turn.

``tests/store/test_store.py`` defines its own ``store`` (DuckDB only), which overrides this
one in that module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lakeshore.store import Store, open_store
from lakeshore.store.memory import InMemoryStore

AnyStore = Store | InMemoryStore


@pytest.fixture(params=["duckdb", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyStore]:
    """A fresh, empty store of each implementation; closed at teardown."""
    s: AnyStore = (
        await open_store(tmp_path / "x.duckdb") if request.param == "duckdb" else InMemoryStore()
    )
    try:
        yield s
    finally:
        await s.close()
