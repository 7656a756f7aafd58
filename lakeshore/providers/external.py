"""The ``external`` backend: daemons are started by hand and register themselves.

The control plane never starts or stops their processes, so a launch request is refused
with the command that starts one instead.
"""

from __future__ import annotations

from typing import Any

from lakeshore.errors import Conflict
from lakeshore.model import Provider, Worker
from lakeshore.providers.base import AccessFor


class ExternalProvider:
    """Refuses launches; has no processes to stop."""

    def check_config(self, config: dict[str, Any]) -> None:
        """An external provider has no settings it reads (any are kept as given)."""

    def check_launch(self, provider: Provider) -> None:
        """Always refuses (409), naming the ``lakeshore daemon run`` command to use."""
        raise Conflict(
            f"provider {provider.name!r} is external: the control plane does not start its "
            "daemons. Start each one by hand on any machine that reaches the API and NATS: "
            "`LAKESHORE_TOKEN=TOKEN lakeshore daemon run --api API_URL "
            f"--namespace {provider.namespace} --provider {provider.name} "
            "--name NAME --queue Q` (--queue is repeatable; without it the daemon pulls "
            "from the default queue). It registers itself."
        )

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        """Never called after :meth:`check_launch` refused; refuses nonetheless."""
        raise Conflict("external providers do not launch daemons; use `lakeshore daemon run`")

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        return False

    def daemons(self) -> list[Worker]:
        return []

    async def close(self) -> None:
        return None
