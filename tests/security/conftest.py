from collections.abc import AsyncIterator

import pytest

from .world import World, make_world


@pytest.fixture
async def world(control_plane, api) -> AsyncIterator[World]:
    async for w in make_world(control_plane, api):
        yield w
