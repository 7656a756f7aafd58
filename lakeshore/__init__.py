"""Lakeshore: named queues of invocations on NATS JetStream, pulled by daemons anywhere."""

from lakeshore.sdk import Client, Invocation, RemoteError
from lakeshore.sdk.udf import udf

__all__ = ["Client", "Invocation", "RemoteError", "__version__", "udf"]

__version__ = "0.1.0"
