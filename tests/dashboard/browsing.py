"""What the dashboard's tests share: the Chromium to drive, how long a page may take, and
signing in (a module of its own: a ``conftest`` cannot be imported by name when several
test folders have one)."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long an assertion on the page waits for the next polls to show it (ms).
EXPECT_MS = 30_000
README_SHOT = Path(__file__).parents[2] / "docs" / "img" / "dashboard-queue.png"


async def sign_in(page: Page, base: str, token: str) -> None:
    await page.goto(base + "/")
    await page.get_by_label("token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("header")).to_be_visible(timeout=EXPECT_MS)
