"""The Python SDK: :class:`Client` (the only HTTP client of the Lakeshore API), ``@udf``
functions (:mod:`lakeshore.sdk.udf`) and the :class:`Invocation` handles they return.

The decorator itself is ``lakeshore.udf``; it is not re-exported here, where its name would
hide the :mod:`lakeshore.sdk.udf` module.
"""

from lakeshore.sdk.call import Call
from lakeshore.sdk.client import Client
from lakeshore.sdk.invocation import Invocation, JobCancelled, JobDropped, JobFailed, RemoteError
from lakeshore.sdk.sync import configure
from lakeshore.sdk.udf import Udf

__all__ = [
    "Call",
    "Client",
    "Invocation",
    "JobCancelled",
    "JobDropped",
    "JobFailed",
    "RemoteError",
    "Udf",
    "configure",
]
