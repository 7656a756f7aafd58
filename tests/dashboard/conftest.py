"""A real headless Chromium (Debian's, driven by Playwright) signed in to a real control plane.

Screenshots go to ``$LAKESHORE_SCREENSHOTS`` or else to ``<tmp_path>/screens``; the folder is
printed. With ``LAKESHORE_UPDATE_SCREENSHOTS=1`` the Queue view is also written to
``docs/img/dashboard-queue.png`` for the README (CI leaves the tree clean).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from browsing import CHROMIUM, CHROMIUM_ARGS, EXPECT_MS, sign_in
from playwright.async_api import Browser, Page, async_playwright, expect


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
def screens(tmp_path: Path) -> Path:
    """The folder this run's screenshots go to."""
    folder = Path(os.environ.get("LAKESHORE_SCREENSHOTS") or tmp_path / "screens")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dashboard screenshots: {folder}")
    return folder


@pytest.fixture
def update_readme_shot() -> bool:
    return os.environ.get("LAKESHORE_UPDATE_SCREENSHOTS") == "1"


async def _accept(dialog) -> None:
    await dialog.accept()


@pytest_asyncio.fixture
async def page(browser: Browser, control_plane) -> AsyncIterator[Page]:
    """A 1280×900 page signed in with the admin token; dialogs (confirm) are accepted."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    tab = await context.new_page()
    expect.set_options(timeout=EXPECT_MS)
    tab.on("dialog", _accept)
    await sign_in(tab, control_plane.api, control_plane.admin_token)
    try:
        yield tab
    finally:
        await context.close()
