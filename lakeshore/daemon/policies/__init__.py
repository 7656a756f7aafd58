"""Policies the job lifecycle composes: lease renewal, retries, timeouts, stopping."""

from lakeshore.daemon.policies.lease import Lease, Leases
from lakeshore.daemon.policies.retries import MAX_BACKOFF_S, backoff_s, persist, should_retry
from lakeshore.daemon.policies.stopping import Stopped, cancelled_error, how_stopped, stop
from lakeshore.daemon.policies.timeouts import RunTimedOut, timed_out_error, within

__all__ = [
    "MAX_BACKOFF_S",
    "Lease",
    "Leases",
    "RunTimedOut",
    "Stopped",
    "backoff_s",
    "cancelled_error",
    "how_stopped",
    "persist",
    "should_retry",
    "stop",
    "timed_out_error",
    "within",
]
