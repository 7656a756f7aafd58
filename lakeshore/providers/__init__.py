"""How daemons are started: the ``local`` (subprocess) and ``external`` backends."""

from lakeshore.providers.base import ExitCallback, Provider, builtin, find_provider, list_providers
from lakeshore.providers.external import ExternalProvider
from lakeshore.providers.local import DAEMON_COMMAND, LocalProvider, daemon_argv

__all__ = [
    "DAEMON_COMMAND",
    "ExitCallback",
    "ExternalProvider",
    "LocalProvider",
    "Provider",
    "builtin",
    "daemon_argv",
    "find_provider",
    "list_providers",
]
