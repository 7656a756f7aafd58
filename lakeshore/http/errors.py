"""One middleware that turns every failure into the API's JSON error shape.

Bad input is a 4xx with a message that says what was wrong; a bug is a 500 whose
traceback goes to the server log, never to the client.
"""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web

from lakeshore.errors import Internal, Invalid, LakeshoreError, TooLarge
from lakeshore.http.routes import reply
from lakeshore.model import ErrorBody, ErrorDetail

log = logging.getLogger(__name__)

#: aiohttp's own HTTP exceptions (unknown route, wrong method, body too large) by status.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def render(err: LakeshoreError) -> web.Response:
    return reply(ErrorBody(ErrorDetail(err.code, err.message)), status=err.http_status)


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except LakeshoreError as e:
        return render(e)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        return render(Invalid(f"invalid request body: {e}"))
    except web.HTTPRequestEntityTooLarge as e:
        return render(TooLarge(f"request body too large: {e.text}"))
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "http_error")
        message = f"{request.method} {request.path}: {e.reason.lower()}"
        if e.status == 404:
            message += "; see GET /v1/openapi.json for the routes"
        return reply(ErrorBody(ErrorDetail(code, message)), status=e.status)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return render(Internal("internal error; the server log has the details"))
