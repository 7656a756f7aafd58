"""Click parameter types that check a value before any network call (exit 2 when bad)."""

from __future__ import annotations

from typing import Any

import click

from lakeshore.errors import InvalidName
from lakeshore.model import validate_name


class QueueName(click.ParamType):
    """A queue name, checked by the rule the server applies (``validate_name``)."""

    name = "QUEUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return validate_name("queue", str(value))
        except InvalidName as e:
            self.fail(e.message, param, ctx)


QUEUE_NAME = QueueName()
