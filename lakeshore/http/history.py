"""History routes: a queue's points per interval, and the namespace's invocation events as
Parquet. Thin — decode, authorise, call the HistoryService, encode."""

from __future__ import annotations

from aiohttp import web

from lakeshore.durations import parse_duration
from lakeshore.http.auth import namespace
from lakeshore.http.routes import Routes, reply, stream_file
from lakeshore.http.state import HISTORY
from lakeshore.model import validate_name
from lakeshore.model.history import QueueHistory

routes = Routes()
#: The media type of a Parquet file (registered with IANA in 2024).
PARQUET = "application/vnd.apache.parquet"
#: The header that tells a client how many rows the Parquet file holds.
ROWS_HEADER = "X-Lakeshore-Rows"


def _duration(request: web.Request, key: str, default: str) -> float:
    return parse_duration(request.query.get(key) or default, key)


@routes.route(
    "GET",
    "/v1/namespaces/{ns}/queues/{name}/history",
    "Submitted, started, succeeded, failed, wait/run percentiles and how far pending rose "
    "per interval (?since=1h&every=1m; at most 1000 points)",
    answer=QueueHistory,
    query=("since", "every"),
)
async def queue_history(request: web.Request) -> web.Response:
    ns = await namespace(request)
    name = validate_name("queue", request.match_info["name"])
    since_s, every_s = _duration(request, "since", "1h"), _duration(request, "every", "1m")
    return reply(await request.app[HISTORY].queue_history(ns.name, name, since_s, every_s))


@routes.route(
    "GET",
    "/v1/namespaces/{ns}/history.parquet",
    "The namespace's invocation events as a Parquet file (?since=1d&queue=; "
    f"{ROWS_HEADER} tells the rows)",
    query=("since", "queue"),
)
async def export(request: web.Request) -> web.StreamResponse:
    ns = await namespace(request)
    queue = request.query.get("queue") or None
    if queue is not None:
        validate_name("queue", queue)
    since_s = _duration(request, "since", "1d")
    done = await request.app[HISTORY].export(ns.name, queue, since_s)
    try:
        headers = {"Content-Type": PARQUET, ROWS_HEADER: str(done.rows)}
        return await stream_file(request, done.path, headers)
    finally:
        done.remove()
