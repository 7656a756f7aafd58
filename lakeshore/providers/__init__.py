"""How daemons are started: the ``local`` (subprocess) and ``external`` backends."""

from lakeshore.providers.base import (
    Backend,
    ExitCallback,
    PlacedCallback,
    builtin,
    find_provider,
    list_providers,
)
from lakeshore.providers.external import ExternalProvider
from lakeshore.providers.local import DAEMON_COMMAND, LocalProvider, daemon_argv

__all__ = [
    "Backend",
    "DAEMON_COMMAND",
    "ExitCallback",
    "ExternalProvider",
    "LocalProvider",
    "PlacedCallback",
    "builtin",
    "daemon_argv",
    "find_provider",
    "list_providers",
]
