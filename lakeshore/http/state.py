"""Typed application state shared by the route modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from lakeshore.plane import ControlPlane

PLANE: web.AppKey[ControlPlane] = web.AppKey("plane")
