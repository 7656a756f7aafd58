"""Job routes: list and show invocations, read their results, cancel and retry them.

Thin: decode, authorise, call the :class:`~lakeshore.services.JobService`, encode.
"""

from __future__ import annotations

from aiohttp import web

from lakeshore.http import query
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import JOBS
from lakeshore.model import (
    Cause,
    InvocationState,
    Job,
    JobDetail,
    JobList,
    Result,
    RetryRequest,
    validate_name,
)

routes = Routes()
BASE = "/v1/namespaces/{ns}/jobs"
#: Longest ``wait_s`` of the result route (seconds).
MAX_WAIT_S = 600.0


@routes.route(
    "GET", BASE, "Invocations, newest first", answer=JobList,
    query=("queue", "state", "limit", "after"),
)  # fmt: skip
async def list_jobs(request: web.Request) -> web.Response:
    ns = await namespace(request)
    q = request.query
    service = request.app[JOBS]
    jobs = await service.list(
        ns.name,
        queue=validate_name("queue", q["queue"]) if q.get("queue") else None,
        state=query.choice(request, "state", InvocationState, Cause),
        limit=query.limit(request, default=100),
        after=query.job_id(request, "after"),
    )
    return reply(JobList(jobs, await service.batches(ns.name, jobs)))


@routes.route("GET", BASE + "/{id}", "One invocation with its attempts", answer=JobDetail)
async def show(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(await request.app[JOBS].show(ns.name, request.match_info["id"]))


@routes.route(
    "GET", BASE + "/{id}/result", "The result once finished (202 Job while not)",
    answer=Result, query=("wait_s",),
)  # fmt: skip
async def result(request: web.Request) -> web.Response:
    ns = await namespace(request)
    wait_s = query.seconds(request, "wait_s", default=0.0, most=MAX_WAIT_S)
    answer = await request.app[JOBS].result(
        ns.name, request.match_info["id"], wait_s,
        org=ns.org, asker=f"token {caller(request).token_id}",
    )  # fmt: skip
    return reply(answer, status=202 if isinstance(answer, Job) else 200)


@routes.route(
    "POST", BASE + "/{id}/cancel",
    "Cancel: a pending job is removed (200), a running one is stopped by its daemon (202)",
    answer=Job,
)  # fmt: skip
async def cancel(request: web.Request) -> web.Response:
    ns = await namespace(request)
    done = await request.app[JOBS].cancel(ns.name, request.match_info["id"], caller(request).name)
    return reply(done.job, status=202 if done.stopping else 200)


@routes.route(
    "POST", BASE + "/{id}/retry",
    "Retry a failed, cancelled or dropped job: its body submitted again to its queue as a "
    "new job (``retry_of``); a command's env values are given again in the body",
    body=RetryRequest, answer=Job, status=202,
)  # fmt: skip
async def retry(request: web.Request) -> web.Response:
    ns = await namespace(request)
    asked = await decode_body(request, RetryRequest)
    job = await request.app[JOBS].retry(
        ns.name, request.match_info["id"], actor=caller(request).token_id, env=asked.env
    )
    return reply(job, status=202)
