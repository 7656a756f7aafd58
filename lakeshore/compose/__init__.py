"""Compose: a ``lakeshore.yaml`` declares providers, queues and daemons per namespace, and
the live system is made to match it (``lakeshore compose diff | up | down | schema``).

:func:`load` checks a file; :func:`read_live` snapshots the namespaces it declares;
:func:`plan_up` / :func:`plan_down` compute the changes (pure); :func:`apply` sends them.
"""

from lakeshore.compose.apply import Outcome, apply
from lakeshore.compose.changes import Change, FieldChange, Op, Plan
from lakeshore.compose.live import Live, read_live
from lakeshore.compose.loader import ComposeFileInvalid, Declared, load, parse
from lakeshore.compose.plan import plan_down, plan_up
from lakeshore.compose.schema import schema
from lakeshore.compose.spec import DAEMON_LABEL, DEFAULT_FILE, PROJECT_LABEL, ComposeFile

__all__ = [
    "DAEMON_LABEL",
    "DEFAULT_FILE",
    "PROJECT_LABEL",
    "Change",
    "ComposeFile",
    "ComposeFileInvalid",
    "Declared",
    "FieldChange",
    "Live",
    "Op",
    "Outcome",
    "Plan",
    "apply",
    "load",
    "parse",
    "plan_down",
    "plan_up",
    "read_live",
    "schema",
]
