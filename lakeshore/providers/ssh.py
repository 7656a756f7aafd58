"""The ``ssh`` backend (skeleton: being built)."""

from __future__ import annotations

from typing import Any

from lakeshore.errors import Conflict
from lakeshore.model import Provider, Worker
from lakeshore.providers.base import AccessFor, ExitCallback, PlacedCallback


class SshProvider:
    def __init__(
        self,
        on_exit: ExitCallback,
        on_placed: PlacedCallback,
        *,
        heartbeat_s: float | None = None,
    ) -> None:
        self._on_exit, self._on_placed, self._heartbeat_s = on_exit, on_placed, heartbeat_s

    def check_config(self, config: dict[str, Any]) -> None:
        return None

    def check_launch(self, provider: Provider) -> None:
        raise Conflict("the ssh provider is not built yet")

    async def launch(self, provider: Provider, workers: list[Worker], access: AccessFor) -> None:
        raise Conflict("the ssh provider is not built yet")

    async def stop(self, worker: Worker, provider: Provider) -> bool:
        return False

    def daemons(self) -> list[Worker]:
        return []

    async def close(self) -> None:
        return None
