"""One middleware that turns every failure into the API's JSON error shape.

Bad input is a 4xx with a message that says what was wrong; a bug is a 500 whose
traceback goes to the server log, never to the client. A client that hangs up before its
request is read (or that stalls its body: :mod:`lakeshore.http.deadlines`) is no bug: one
INFO line each, no traceback.
"""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web

from lakeshore.errors import (
    Internal,
    Invalid,
    LakeshoreError,
    NotLeader,
    RequestTimeout,
    TooLarge,
    TooLong,
)
from lakeshore.http.deadlines import BodyStalled
from lakeshore.http.routes import reply
from lakeshore.model import MAX_JSON_DEPTH, ErrorBody, ErrorDetail

log = logging.getLogger(__name__)

#: Longest URL (path and query) a route answers; longer is 414 (the server reads request
#: lines up to :data:`MAX_LINE_BYTES`, so that the answer is in the API's error shape).
MAX_URL_BYTES = 8_190
#: Longest request line the HTTP server parses (``handler_args`` of the runner).
MAX_LINE_BYTES = 1024 * 1024
#: aiohttp's own HTTP exceptions (unknown route, wrong method, body too large) by status.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
#: The status counted (``lakeshore_http_requests_total``) for a request whose client hung
#: up before it was read; never sent (nginx's "client closed request").
CLIENT_CLOSED = 499


#: How long a client waits before it asks again after ``not_leader`` (seconds).
RETRY_AFTER_S = 1


def render(err: LakeshoreError) -> web.Response:
    if isinstance(err, NotLeader):
        detail = ErrorDetail(err.code, err.message, leader_url=err.leader_url)
        answer = reply(ErrorBody(detail), status=err.http_status)
        answer.headers["Retry-After"] = str(RETRY_AFTER_S)
        return answer
    return reply(ErrorBody(ErrorDetail(err.code, err.message)), status=err.http_status)


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    if len(request.raw_path) > MAX_URL_BYTES:
        return render(
            TooLong(
                f"the URL is {len(request.raw_path)} bytes, more than {MAX_URL_BYTES}; "
                "send large inputs in the request body"
            )
        )
    try:
        return await handler(request)
    except LakeshoreError as e:
        return render(e)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        return render(Invalid(f"invalid request body: {e}"))
    except RecursionError:
        return render(Invalid(f"invalid request body: JSON nested more than {MAX_JSON_DEPTH} deep"))
    except web.HTTPRequestEntityTooLarge as e:
        return render(TooLarge(f"request body too large: {e.text}"))
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "http_error")
        message = f"{request.method} {request.path}: {e.reason.lower()}"
        if e.status == 404:
            message += "; see GET /v1/openapi.json for the routes"
        answer = reply(ErrorBody(ErrorDetail(code, message)), status=e.status)
        if "Allow" in e.headers:  # a 405 says which methods the path has
            answer.headers["Allow"] = e.headers["Allow"]
        return answer
    except BodyStalled as e:
        log.info("%s %s from %s: %s; answered 408", request.method, request.path,
                 request.remote, e)  # fmt: skip
        answer = render(RequestTimeout(f"{e}"))
        answer.force_close()
        return answer
    except Exception as e:
        if isinstance(e, ConnectionError) and _hung_up(request):
            log.info("%s %s from %s: the client closed the connection before its request "
                     "was read", request.method, request.path, request.remote)  # fmt: skip
            return web.Response(status=CLIENT_CLOSED)
        log.exception("unhandled error on %s %s", request.method, request.path)
        return render(Internal("internal error; the server log has the details"))


def _hung_up(request: web.Request) -> bool:
    """The client's connection is gone (a reset from elsewhere, NATS or a provider's SSH, is
    a failure of this server's and keeps its traceback)."""
    transport = request.transport
    return transport is None or transport.is_closing()
