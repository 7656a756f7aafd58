"""The dashboard in a real Chromium against a real control plane, real daemons and real jobs."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from browsing import EXPECT_MS, README_SHOT, sign_in
from playwright.async_api import Page, expect

from lakeshore.code import pack

NS = "/v1/namespaces/default"


async def launch(api, name: str, queues: list[str]) -> dict:
    status, body = await api.post(f"{NS}/daemons", {"name": name, "queues": queues})
    assert status == 202, body
    return body["workers"][0]


async def submit(api, queue: str, **spec) -> str:
    status, body = await api.post(f"{NS}/queues/{queue}/invocations", spec)
    assert status == 202, body
    return body["ids"][0]


async def show(page: Page, hash_: str) -> None:
    await page.evaluate("h => { location.hash = h; }", hash_)


async def test_sign_in_refuses_a_bad_token_and_keeps_a_good_one_in_the_session_only(
    browser, control_plane
):
    page = await browser.new_page()
    try:
        await page.goto(control_plane.api + "/")
        await page.get_by_label("token").fill("not-a-token")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator("#signin-error")).to_contain_text("sign in again")
        await expect(page.locator("header")).to_be_hidden()
        await sign_in(page, control_plane.api, control_plane.admin_token)
        await expect(page.locator("#view h1")).to_have_text("Queues", timeout=EXPECT_MS)
        stored = await page.evaluate("[sessionStorage.length, localStorage.length]")
        assert stored[1] == 0 and stored[0] >= 1
        assert await page.evaluate("sessionStorage.getItem('lakeshore.token')") == (
            control_plane.admin_token
        )
    finally:
        await page.close()


async def test_every_view_shows_real_data(page: Page, api, screens: Path, update_readme_shot):
    assert (await api.post(f"{NS}/queues", {"name": "web"}))[0] == 201
    elastic = {"kind": "fully_elastic", "min": 0, "max": 1}
    assert (await api.post(f"{NS}/queues", {"name": "gpu", "elasticity": elastic}))[0] == 201
    assert (await api.post(f"{NS}/queues", {"name": "idle"}))[0] == 201
    worker = await launch(api, "dash", ["web"])
    job = await submit(api, "web", fn="os:getpid")
    status, result = await api.get(f"{NS}/jobs/{job}/result?wait_s=30")
    assert status == 200 and result["ok"], result
    broken = await submit(api, "web", fn="json:loads", args=["{not json"])
    assert (await api.get(f"{NS}/jobs/{broken}/result?wait_s=30"))[0] == 200
    waiting = await submit(api, "idle", fn="os:getpid")

    await show(page, "#/queues")
    row = page.locator('tr[data-queue="default/web"]')
    await expect(row.locator('[data-col="state"]')).to_have_text("active")
    await expect(row.locator('[data-col="daemons"]')).to_have_text("1")
    await expect(page.locator('tr[data-queue="default/idle"] [data-col="pending"]')).to_have_text(
        "1"
    )
    await page.get_by_label("state").select_option("archived")
    await expect(page.locator("tr[data-queue]")).to_have_count(0)
    await page.get_by_label("state").select_option("")
    await expect(page.locator("tr[data-queue]")).to_have_count(4)
    await page.screenshot(path=screens / "queues.png", full_page=True)

    await row.get_by_role("link", name="web").click()
    await expect(page.locator("#view h1")).to_contain_text("Queue default/web")
    await expect(page.locator('tr[data-member="dash"]')).to_contain_text(re.compile("idle|busy"))
    await expect(page.locator("#elasticity")).to_contain_text('"kind": "fixed"')
    await expect(page.locator('[data-key="succeeded"]')).to_have_text("1")
    await expect(page.locator('[data-key="failed"]')).to_have_text("1")
    await expect(page.locator("#backlog-plot path[data-series=pending]")).to_have_count(1)
    await expect(page.get_by_role("cell", name="created", exact=True)).to_be_visible()
    await page.screenshot(path=screens / "queue.png", full_page=True)
    if update_readme_shot:
        README_SHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(screens / "queue.png", README_SHOT)

    await show(page, "#/jobs")
    await expect(page.locator(f'tr[data-job="{job}"] [data-col="state"]')).to_have_text("succeeded")
    await expect(page.locator(f'tr[data-job="{waiting}"]')).to_contain_text("no_members (#0)")
    await page.locator('select[data-filter="within"]').select_option("5m")
    await expect(page).to_have_url(re.compile(r"within=5m"))
    await expect(page.locator(f'tr[data-job="{job}"] [data-col="state"]')).to_have_text("succeeded")
    await page.screenshot(path=screens / "jobs.png", full_page=True)

    await page.get_by_role("link", name=job).click()
    await expect(page.locator("#job-state")).to_have_text("succeeded")
    attempt = page.locator('tr[data-attempt="1"]')
    await expect(attempt.get_by_title(worker["id"])).to_have_text("dash")
    await expect(attempt).to_contain_text("succeeded")
    await expect(attempt.locator(".timeline .bar")).to_have_count(1)
    await expect(page.locator("#result-value")).to_have_text(re.compile(r"^\d+$"))
    await page.screenshot(path=screens / "job.png", full_page=True)

    await show(page, f"#/job/{broken}")
    await expect(page.locator("#job-state")).to_have_text("failed")
    await expect(page.locator(".card .error")).to_contain_text("JSONDecodeError")
    await expect(page.locator("#traceback")).to_contain_text("Traceback")

    await show(page, f"#/job/{waiting}")
    await expect(page.locator('[data-key="pending reason"]')).to_have_text("no_members")
    await expect(page.locator('[data-key="position"]')).to_have_text("0")

    await show(page, "#/daemons")
    daemon = page.locator('tr[data-worker="dash"]')
    await expect(daemon.locator('[data-col="status"]')).to_have_text(re.compile("idle|busy"))
    await expect(daemon).to_contain_text("local")
    await page.screenshot(path=screens / "daemons.png", full_page=True)

    await show(page, "#/controller")
    unit = page.locator('tr[data-unit="queue/gpu"]')
    await expect(unit).to_contain_text("fully_elastic")
    await expect(page.locator("#view p.muted")).to_contain_text("tick")
    await page.screenshot(path=screens / "controller.png", full_page=True)


async def test_the_drain_and_unarchive_buttons_change_the_queues_state(page: Page, api):
    assert (await api.post(f"{NS}/queues", {"name": "etl"}))[0] == 201
    await show(page, "#/queue/default/etl")
    await page.get_by_role("button", name="drain").click()
    await expect(page.locator("#queue-state")).to_have_text("draining")
    assert (await api.get(f"{NS}/queues/etl"))[1]["state"] == "draining"
    await page.get_by_role("button", name="unarchive").click()
    await expect(page.locator("#queue-state")).to_have_text("active")
    assert (await api.get(f"{NS}/queues/etl"))[1]["state"] == "active"


async def test_editing_a_daemons_queues_reaches_the_daemon(page: Page, api):
    for name in ("web", "batch"):
        assert (await api.post(f"{NS}/queues", {"name": name}))[0] == 201
    worker = await launch(api, "editor", ["web"])
    await show(page, "#/daemons")
    row = page.locator('tr[data-worker="editor"]')
    await expect(row.locator('[data-col="status"]')).to_have_text(re.compile("idle|busy"))
    await row.get_by_label("add a queue to editor").fill("batch")
    await row.get_by_role("button", name="add").click()
    await expect(row.locator(".chip")).to_have_text(["web×", "batch×"])
    await row.get_by_title("remove web").click()
    await expect(row.locator(".chip")).to_have_text(["batch×"])
    _, seen = await api.get(f"{NS}/workers/{worker['id']}")
    assert seen["queues"] == ["batch"]
    _, members = await api.get(f"{NS}/queues/batch")
    await show(page, "#/queue/default/batch")
    await expect(page.locator('tr[data-member="editor"]')).to_be_visible()
    assert [m["name"] for m in members["members"]] == ["editor"]

    await show(page, "#/daemons")
    await row.get_by_role("button", name="stop").click()
    await expect(row.locator('[data-col="status"]')).to_have_text(re.compile("retiring|stopped"))


async def test_the_jobs_view_updates_by_itself_when_a_job_finishes(page: Page, api, tmp_path: Path):
    assert (await api.post(f"{NS}/queues", {"name": "gated"}))[0] == 201
    await launch(api, "gatekeeper", ["gated"])
    gate = tmp_path / "gate"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    job = await submit(api, "gated", command=["sh", "-c", wait])
    await show(page, "#/jobs?queue=gated")
    state = page.locator(f'tr[data-job="{job}"] [data-col="state"]')
    await expect(state).to_have_text("running")
    loads = await page.evaluate("performance.getEntriesByType('navigation').length")
    gate.touch()
    await expect(state).to_have_text("succeeded")
    assert await page.evaluate("performance.getEntriesByType('navigation').length") == loads


async def test_the_job_view_shows_a_stop_while_its_grace_runs(page: Page, api, tmp_path: Path):
    assert (await api.post(f"{NS}/queues", {"name": "deaf"}))[0] == 201
    await launch(api, "stubborn", ["deaf"])
    started = tmp_path / "started"
    deaf = f"trap '' TERM; touch {started}; exec sleep 1000"
    job = await submit(api, "deaf", command=["sh", "-c", deaf], stop_grace_s=6)
    await show(page, f"#/job/{job}")
    await expect(page.locator("#job-state")).to_have_text("running")
    assert (await api.post(f"{NS}/jobs/{job}/cancel", {}))[0] == 202
    await expect(page.locator("#view")).to_contain_text(
        re.compile(r"stopping\s*cancel requested; SIGTERM sent \d+ s ago, SIGKILL in \d+ s")
    )
    assert started.exists()
    # It ends within its grace: nothing of it outlives the test's daemon.
    await expect(page.locator("#job-state")).to_have_text("cancelled", timeout=20_000)


async def test_the_retry_button_opens_a_new_job_linked_to_the_old_one(page: Page, api):
    assert (await api.post(f"{NS}/queues", {"name": "redo"}))[0] == 201  # no daemon: it waits
    job = await submit(api, "redo", command=["true"])
    assert (await api.post(f"{NS}/jobs/{job}/cancel", {}))[0] == 200
    await show(page, f"#/job/{job}")
    await expect(page.locator("#job-state")).to_have_text("cancelled")
    await page.get_by_role("button", name="retry").click()
    await expect(page).not_to_have_url(re.compile(f"#/job/{job}$"))
    new = page.url.rsplit("/", 1)[-1]
    await expect(page.locator("#view")).to_contain_text(re.compile(f"retry of\\s*{job}"))
    _, old = await api.get(f"{NS}/jobs/{job}")
    assert old["retried_by"] == [new]
    _, fresh = await api.get(f"{NS}/jobs/{new}")
    assert fresh["retry_of"] == job and fresh["command"] == ["true"]


async def test_the_pending_chart_shows_a_burst_that_came_and_went_within_a_minute(page: Page, api):
    assert (await api.post(f"{NS}/queues", {"name": "burst"}))[0] == 201
    await launch(api, "burster", ["burst"])
    await show(page, "#/daemons")
    await expect(page.locator('tr[data-worker="burster"] [data-col="status"]')).to_have_text("idle")
    status, body = await api.post(
        f"{NS}/queues/burst/invocations", {"invocations": [{"fn": "os:getpid"}] * 5}
    )
    assert status == 202, body
    for job in body["ids"]:
        status, result = await api.get(f"{NS}/jobs/{job}/result?wait_s=30")
        assert status == 200 and result["ok"], result
    await _pending_chart_peaks_at(page, "burst", 5)


async def test_the_pending_chart_of_a_retried_job_never_shows_more_than_was_pending(
    page: Page, api, screens: Path
):
    """Two retries raise pending twice and start it three times: a chart that walked back
    from the current count by submits and starts alone showed 2 pending before the queue
    had any job; derived from the history's own changes, it never passes 1."""
    assert (await api.post(f"{NS}/queues", {"name": "again"}))[0] == 201
    await launch(api, "retrier", ["again"])
    command = ["sh", "-c", '[ "$LAKESHORE_ATTEMPT" -ge 3 ] || exit 1']
    job = await submit(api, "again", command=command, max_attempts=3)
    status, result = await api.get(f"{NS}/jobs/{job}/result?wait_s=30")
    assert status == 200 and result["ok"], result
    await _pending_chart_peaks_at(page, "again", 1)
    await page.screenshot(path=screens / "queue-retried.png", full_page=True)


async def _pending_chart_peaks_at(page: Page, queue: str, peak: int) -> None:
    """The queue's page, once nothing is pending: its pending line's highest point."""
    await show(page, f"#/queue/default/{queue}")
    await expect(page.locator('[data-key="pending"]')).to_have_text("0")
    pending = page.locator("#backlog-plot path[data-series=pending]")
    await expect(pending).to_have_attribute("data-max", str(peak))


async def test_jobs_and_attempts_name_the_daemon_that_ran_them(page: Page, api):
    assert (await api.post(f"{NS}/queues", {"name": "prep"}))[0] == 201
    worker = await launch(api, "prep-00", ["prep"])
    job = await submit(api, "prep", fn="os:getpid")
    assert (await api.get(f"{NS}/jobs/{job}/result?wait_s=30"))[0] == 200
    await show(page, "#/jobs?queue=prep")
    row = page.locator(f'tr[data-job="{job}"]')
    await expect(row.locator('[data-col="state"]')).to_have_text("succeeded")
    await expect(row).to_contain_text("prep-00")
    await expect(row).not_to_contain_text(worker["id"])
    await row.get_by_role("link", name=job).click()
    attempt = page.locator('tr[data-attempt="1"]')
    await expect(attempt).to_contain_text("prep-00")
    await expect(attempt).not_to_contain_text(worker["id"])


async def test_a_traceback_starts_at_the_users_frame_folds_lakeshores_and_wraps(
    page: Page, api, monkeypatch, screens: Path
):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    assert (await api.post(f"{NS}/queues", {"name": "tb"}))[0] == 201
    await launch(api, "tracer", ["tb"])
    job = await submit(api, "tb", fn="dashboard_jobs:refuse", args=[400], max_attempts=2)
    status, result = await api.get(f"{NS}/jobs/{job}/result?wait_s=30")
    assert status == 200 and result["error"]["type"] == "builtins.ValueError", result
    await show(page, f"#/job/{job}")
    await expect(page.locator("#job-state")).to_have_text("failed")
    shown = page.locator("#traceback")
    await expect(shown.get_by_text("dashboard_jobs.py")).to_be_visible()
    fold = shown.locator("details")
    await expect(fold).to_have_count(1)
    await expect(fold.locator("summary")).to_have_text(re.compile(r"^\d+ Lakeshore frames?$"))
    await expect(fold.get_by_text("worker_main.py")).to_be_hidden()
    assert await shown.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    for attempt in ("1", "2"):
        row = page.locator(f'tr[data-attempt="{attempt}"]')
        await expect(row).to_contain_text("ValueError: refused:x")
    await fold.locator("summary").click()
    await expect(fold.get_by_text("worker_main.py")).to_be_visible()
    live = await page.locator("#live").text_content()
    await expect(page.locator("#live")).not_to_have_text(live or "")
    await expect(fold.get_by_text("worker_main.py")).to_be_visible()
    await page.screenshot(path=screens / "traceback.png", full_page=True)


async def test_a_timed_out_job_shows_its_cause_and_the_state_filter_finds_it(
    page: Page, api, screens: Path
):
    assert (await api.post(f"{NS}/queues", {"name": "slow"}))[0] == 201
    await launch(api, "slowpoke", ["slow"])
    job = await submit(
        api, "slow", command=["sleep", "60"], timeout_s=1, stop_grace_s=0, max_attempts=1
    )
    status, result = await api.get(f"{NS}/jobs/{job}/result?wait_s=30")
    assert status == 200 and result["ok"] is False, result
    await show(page, f"#/job/{job}")
    await expect(page.locator("#job-state")).to_have_text("failed timed_out")
    await expect(page.locator('tr[data-attempt="1"]')).to_contain_text("timed_out SIGKILL")
    await page.screenshot(path=screens / "job-timed-out.png", full_page=True)
    await show(page, "#/jobs?state=timed_out")
    row = page.locator(f'tr[data-job="{job}"]')
    await expect(row.locator('[data-col="state"]')).to_have_text("failed timed_out")
    await expect(page.locator("tr[data-job]")).to_have_count(1)
    await page.screenshot(path=screens / "jobs-timed-out.png", full_page=True)


async def test_a_job_shows_its_code_snapshot_and_its_retry_keeps_it(
    page: Page, api, tmp_path, screens: Path
):
    (tmp_path / "tasks.py").write_text("def f():\n    return 1\n")
    snap = pack(tmp_path)
    assert (await api.request("PUT", f"{NS}/code/{snap.digest}", data=snap.data))[0] == 201
    assert (await api.post(f"{NS}/queues", {"name": "coded"}))[0] == 201  # no daemon: it waits
    job = await submit(api, "coded", fn="tasks:f", code=snap.digest, isolation="process")
    assert (await api.post(f"{NS}/jobs/{job}/cancel", {}))[0] == 200
    await show(page, f"#/job/{job}")
    await expect(page.locator("#job-state")).to_have_text("cancelled")
    shown = page.locator(f'code[title="{snap.digest}"]')
    await expect(shown).to_have_text(snap.digest[:19])
    await page.screenshot(path=screens / "job-code.png", full_page=True)
    await page.get_by_role("button", name="retry").click()
    await expect(page).not_to_have_url(re.compile(f"#/job/{job}$"))
    new = page.url.rsplit("/", 1)[-1]
    _, fresh = await api.get(f"{NS}/jobs/{new}")
    assert (fresh["code"], fresh["isolation"]) == (snap.digest, "process")


async def test_the_daemons_view_shows_gpus_in_use_of_each_daemons_and_their_type(
    page: Page, api, monkeypatch, screens: Path, tmp_path: Path
):
    # The local provider's daemon inherits this environment: its nvidia-smi is the stand-in
    # printing a real 8 x H100 host's output (tests/resources/captures; no GPU here).
    resources = Path(__file__).parents[1] / "resources"
    monkeypatch.setenv("PATH", f"{resources / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_HOST", str(resources / "captures" / "h100x8"))
    assert (await api.post(f"{NS}/queues", {"name": "training-h100"}))[0] == 201
    await launch(api, "gpu-1", ["training-h100"])
    gate = tmp_path / "go"
    wait = ["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done']
    job = await submit(api, "training-h100", command=wait, resources={"gpus": 2})
    await show(page, "#/daemons")
    cell = page.locator('tr[data-worker="gpu-1"] [data-col="gpus"]')
    await expect(cell).to_have_text("2/8 NVIDIA H100 80GB HBM3", timeout=EXPECT_MS)
    await page.screenshot(path=screens / "daemons-gpus.png", full_page=True)
    gate.touch()
    status, _ = await api.get(f"{NS}/jobs/{job}/result?wait_s=30")
    assert status == 200
    await show(page, "#/daemons")
    await expect(cell).to_have_text("0/8 NVIDIA H100 80GB HBM3", timeout=EXPECT_MS)
