"""The row store (DuckDB): namespaces, tokens, queues, workers and their event history."""

from lakeshore.store.duckdb import Store, open_store

__all__ = ["Store", "open_store"]
