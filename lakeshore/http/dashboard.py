"""The web dashboard: one HTML page, four JavaScript modules (``app.js`` routes and polls,
``views.js`` renders the queues, daemons and controller, ``jobs.js`` the jobs, ``lib.js``
helps) and one stylesheet, served as is.

They need no token: they hold no data. The page signs in with a token, which it keeps in
the browser session only, and reads everything from the token-guarded ``/v1`` routes.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from lakeshore.http.routes import Routes

routes = Routes()

#: Where the dashboard's files live (package data, shipped by ``pip install``).
STATIC_DIR = Path(__file__).parent / "static"
#: URL prefix of the dashboard's files.
PREFIX = "/dashboard/"
#: The files served under :data:`PREFIX`, with their content types; nothing else is.
FILES = {
    "app.js": "text/javascript",
    "jobs.js": "text/javascript",
    "lib.js": "text/javascript",
    "views.js": "text/javascript",
    "style.css": "text/css",
}


def is_public(path: str) -> bool:
    """Whether ``path`` is one of the dashboard's (public) files."""
    return path == "/" or (path.startswith(PREFIX) and path[len(PREFIX) :] in FILES)


# Registered on the table only, not documented: the OpenAPI document describes the JSON API,
# and its fuzz tests expect JSON answers.
@routes.table.get("/")
async def index(request: web.Request) -> web.Response:
    return _file("index.html", "text/html")


@routes.table.get(PREFIX + "{file}")
async def asset(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    if name not in FILES:
        raise web.HTTPNotFound()
    return _file(name, FILES[name])


def _file(name: str, content_type: str) -> web.Response:
    # No caching: an upgraded server must not be paired with an old script in the browser.
    return web.Response(
        body=(STATIC_DIR / name).read_bytes(),
        content_type=content_type,
        charset="utf-8",
        headers={"Cache-Control": "no-cache"},
    )
