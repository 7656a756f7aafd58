"""The Python SDK: :class:`Client`, the only HTTP client of the Lakeshore API."""

from lakeshore.sdk.client import Call, Client

__all__ = ["Call", "Client"]
