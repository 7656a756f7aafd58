"""Lakeshore: named queues of invocations on NATS JetStream, pulled by daemons anywhere."""

from lakeshore.errors import RunStopped
from lakeshore.sdk import Client, Invocation, RemoteError
from lakeshore.sdk.udf import udf

__all__ = ["Client", "Invocation", "RemoteError", "RunStopped", "__version__", "udf"]

__version__ = "0.1.0"
