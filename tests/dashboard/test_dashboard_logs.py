"""The Job view's live log, in a real Chromium: it shows a run's output while it runs and
keeps following until the job ends."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Page, expect

NS = "/v1/namespaces/default"


async def test_the_job_view_follows_the_log_while_the_job_runs(page: Page, api, tmp_path: Path):
    assert (await api.post(f"{NS}/queues", {"name": "chatty"}))[0] == 201
    status, body = await api.post(f"{NS}/daemons", {"name": "talker", "queues": ["chatty"]})
    assert status == 202, body
    gate = tmp_path / "gate"
    script = f"echo first; while [ ! -e {gate} ]; do sleep 0.05; done; echo second >&2"
    status, body = await api.post(
        f"{NS}/queues/chatty/invocations", {"command": ["sh", "-c", script]}
    )
    assert status == 202, body
    [job] = body["ids"]
    await page.evaluate("h => { location.hash = h; }", f"#/job/{job}")
    log = page.locator("#job-log")
    await expect(log).to_have_text("first\n")
    await expect(page.locator("#job-state")).to_have_text("running")
    gate.touch()
    await expect(log).to_have_text("first\nsecond\n")
    await expect(page.locator("#job-log-note")).to_have_text("the job ended: succeeded")
