"""The ``external`` backend: daemons are started by hand and register themselves.

The control plane never starts or stops their processes, so a launch request is refused
with the command that starts one instead, filled with what the refusing side knows.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

from lakeshore.errors import Conflict
from lakeshore.model import Provider, Worker
from lakeshore.providers.base import AccessFor

#: Where ``lakeshore daemon run`` reads its token when no ``--token`` is given: a command
#: line is visible to every user of the machine (``ps``), the environment is not.
TOKEN_ENV = "LAKESHORE_TOKEN"


def daemon_run_command(
    provider: Provider,
    *,
    api: str | None = None,
    name: str | None = None,
    queues: Sequence[str] = (),
) -> str:
    """The ``lakeshore daemon run`` command line that starts one daemon of ``provider``,
    each value quoted for a POSIX shell. It carries no token: the daemon reads it from
    ``LAKESHORE_TOKEN``.

    Args:
        api: the control plane's API URL(s) (``--api``); ``None``: left out, so the
            daemon uses ``LAKESHORE_API`` or the client config's.
        name: the daemon's name (``--name``); ``None``: left out (``HOSTNAME-PID``).
        queues: the queues it pulls from (``--queue`` each); none: the default queue.
    """
    argv = ["lakeshore", "daemon", "run"]
    if api:
        argv += ["--api", api]
    argv += ["--namespace", provider.namespace, "--provider", provider.name]
    if name:
        argv += ["--name", name]
    for q in queues:
        argv += ["--queue", q]
    return shlex.join(argv)


def refusal(
    provider: Provider,
    *,
    api: str | None = None,
    names: Sequence[str] = (),
    queues: Sequence[str] = (),
) -> str:
    """Why ``provider`` launches nothing, and the commands to paste instead: one
    ``lakeshore daemon run`` per name in ``names`` (one without ``--name`` if none),
    after ``export LAKESHORE_TOKEN=<your token>``. No token value is ever shown.

    Args:
        api, queues: as for :func:`daemon_run_command`; what is not known is left out
            and said how to add.
    """
    commands = [
        daemon_run_command(provider, api=api, name=n, queues=queues) for n in names or [None]
    ]
    missing = []
    if not api:
        missing.append("--api URL (else LAKESHORE_API or the client config's is used)")
    if not queues:
        missing.append("--queue Q for each queue (else it pulls from the default queue)")
    add = f" Add {' and '.join(missing)}." if missing else ""
    return (
        f"provider {provider.name!r} is external: the control plane does not start its "
        "daemons. Start each one by hand on any machine that reaches the API and NATS, "
        f"with a token of the org of namespace {provider.namespace!r} in {TOKEN_ENV} "
        "(never --token: every user of the machine sees a command line): "
        f"`export {TOKEN_ENV}=<your token>`, then "
        + ", ".join(f"`{c}`" for c in commands)
        + f".{add} It registers itself."
    )


class ExternalProvider:
    """Refuses launches; has no processes to stop.

    Args:
        api_url: the API URL daemons started by hand should use, asked for at each
            refusal and filled into the command it shows (``None``: the command leaves
            ``--api`` out).
    """

    def __init__(self, api_url: Callable[[], str | None] = lambda: None) -> None:
        self._api_url = api_url

    def check_config(self, config: dict[str, Any]) -> None:
        """An external provider has no settings it reads (any are kept as given)."""

    def check_launch(
        self, provider: Provider, *, names: Sequence[str] = (), queues: Sequence[str] = ()
    ) -> None:
        """Always refuses (409) with the ``lakeshore daemon run`` command(s) to use.

        Args:
            names, queues: the launch request's daemon names and queues, filled into the
                commands when given.
        """
        raise Conflict(refusal(provider, api=self._api_url(), names=names, queues=queues))

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        """Never called after :meth:`check_launch` refused; refuses nonetheless."""
        names, queues = [w.name for w in workers], workers[0].queues if workers else []
        raise Conflict(refusal(provider, api=self._api_url(), names=names, queues=queues))

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        return False

    def daemons(self) -> list[Worker]:
        return []

    async def close(self) -> None:
        return None


__all__ = ["TOKEN_ENV", "ExternalProvider", "daemon_run_command", "refusal"]
