"""The dashboard's files are public and shipped with the package; its data is not public."""

from __future__ import annotations

import tomllib
from pathlib import Path

from lakeshore.http import dashboard

ROOT = Path(__file__).parents[2]


async def test_the_page_scripts_and_stylesheet_answer_without_a_token(api):
    async with api._session.get(api.base + "/") as r:
        assert (r.status, r.content_type) == (200, "text/html")
        page = await r.text()
    assert '<script type="module" src="/dashboard/app.js">' in page
    for name, kind in dashboard.FILES.items():
        async with api._session.get(f"{api.base}/dashboard/{name}") as r:
            assert (r.status, r.content_type) == (200, kind)


async def test_nothing_else_is_public(api):
    async with api._session.get(api.base + "/dashboard/../config.toml") as r:
        assert r.status in (401, 404)
    async with api._session.get(api.base + "/dashboard/index.py") as r:
        assert r.status == 401
    status, body = await api.request("GET", "/v1/namespaces", token=None)
    assert status == 401, body


def test_the_files_are_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["lakeshore.http"]
    shipped = {p.name for g in globs for p in dashboard.STATIC_DIR.glob(g.removeprefix("static/"))}
    assert shipped == {"index.html", *dashboard.FILES}
