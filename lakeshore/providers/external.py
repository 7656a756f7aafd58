"""The ``external`` backend: daemons are started by hand and register themselves.

The control plane never starts or stops their processes, so a launch request is refused
with the command that starts one instead.
"""

from __future__ import annotations

from lakeshore.errors import Conflict
from lakeshore.model import Provider, Worker


class ExternalProvider:
    """Refuses launches; has no processes to stop."""

    def check_launch(self, provider: Provider, nats_url: str) -> None:
        """Always refuses (409), naming the ``lakeshore daemon run`` command to use."""
        raise Conflict(
            f"provider {provider.name!r} is external: the control plane does not start its "
            "daemons. Start each one by hand on any machine that reaches NATS: "
            f"`lakeshore daemon run --nats-url {nats_url or 'NATS_URL'} "
            f"--namespace {provider.namespace} --provider {provider.name} "
            "--name NAME --queue Q` (--queue is repeatable; without it the daemon pulls "
            "from the default queue). It registers itself."
        )

    async def launch(self, workers: list[Worker], nats_url: str) -> None:
        """Never called after :meth:`check_launch` refused; refuses nonetheless."""
        raise Conflict("external providers do not launch daemons; use `lakeshore daemon run`")

    async def stop(self, worker_id: str) -> bool:
        return False

    async def close(self) -> None:
        return None
