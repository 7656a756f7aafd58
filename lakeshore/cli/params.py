"""Click parameter types that check a value before any network call (exit 2 when bad)."""

from __future__ import annotations

from typing import Any

import click

from lakeshore.durations import parse_duration
from lakeshore.errors import Invalid, InvalidName
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


class Duration(click.ParamType):
    """A duration like ``30s``, ``5m``, ``1h`` or ``2d``, checked by the rule the server
    applies (:func:`lakeshore.durations.parse_duration`); the text is what is sent."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            parse_duration(str(value), "it")
        except Invalid as e:
            self.fail(e.message, param, ctx)
        return str(value).strip()


DURATION = Duration()
