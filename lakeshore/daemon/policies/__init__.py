"""Policies the job lifecycle composes: lease renewal, retries, timeouts."""

from lakeshore.daemon.policies.lease import Lease
from lakeshore.daemon.policies.retries import MAX_BACKOFF_S, backoff_s, persist, should_retry
from lakeshore.daemon.policies.timeouts import RunTimedOut, timed_out_error, within

__all__ = [
    "MAX_BACKOFF_S",
    "Lease",
    "RunTimedOut",
    "backoff_s",
    "persist",
    "should_retry",
    "timed_out_error",
    "within",
]
