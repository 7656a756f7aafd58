"""Lakeshore: named queues of invocations on NATS JetStream, pulled by daemons anywhere."""

__all__ = ["__version__"]

__version__ = "0.1.0"
