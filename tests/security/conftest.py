from collections.abc import AsyncIterator

import pytest

from .world import World, make_world


@pytest.fixture
async def control_plane(plane_factory):
    """The plane every security test attacks lets producers publish into their own queues'
    streams (``direct_submit``): the widest grant a producer can get, so the probes check
    that it reaches nothing of another org's."""
    return await plane_factory(direct_submit=True)


@pytest.fixture
async def world(control_plane, api) -> AsyncIterator[World]:
    async for w in make_world(control_plane, api):
        yield w
