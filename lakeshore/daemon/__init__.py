"""The worker daemon (``lakeshore daemon run``): claim, run, report, drain."""

from lakeshore.daemon.main import Running, run_daemon
from lakeshore.daemon.settings import DaemonSettings

__all__ = ["DaemonSettings", "Running", "run_daemon"]
