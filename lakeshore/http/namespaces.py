"""Namespace and token routes."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from lakeshore import access
from lakeshore.errors import TokenNotFound
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import ACCESS, FLEET
from lakeshore.model import (
    Namespace,
    NamespaceCreate,
    NamespaceDetail,
    Token,
    TokenCreate,
    TokenCreated,
)

routes = Routes()


class NamespaceList(Struct, frozen=True):
    namespaces: list[Namespace]


class TokenList(Struct, frozen=True):
    tokens: list[Token]


@routes.route(
    "POST",
    "/v1/namespaces",
    "Create a namespace in an org",
    body=NamespaceCreate,
    answer=Namespace,
    status=201,
)
async def create(request: web.Request) -> web.Response:
    body = await decode_body(request, NamespaceCreate)
    org = access.visible_org(caller(request), body.org)
    ns = await request.app[ACCESS].create_namespace(body.name, org)
    return reply(ns, status=201)


@routes.route("GET", "/v1/namespaces", "The namespaces this token may use", answer=NamespaceList)
async def list_namespaces(request: web.Request) -> web.Response:
    rows = await request.app[ACCESS].list_namespaces(caller(request).org)
    return reply(NamespaceList(rows))


@routes.route(
    "GET",
    "/v1/namespaces/{ns}",
    "One namespace, with the server's quotas and what it and its org use of each",
    answer=NamespaceDetail,
)
async def show(request: web.Request) -> web.Response:
    return reply(await request.app[FLEET].namespace(await namespace(request)))


@routes.route(
    "POST",
    "/v1/namespaces/{ns}/tokens",
    "Issue a token (shown once)",
    body=TokenCreate,
    answer=TokenCreated,
    status=201,
)
async def create_token(request: web.Request) -> web.Response:
    ns = await namespace(request)
    body = await decode_body(request, TokenCreate)
    token = await request.app[ACCESS].issue_token(ns.name, body.description)
    return reply(token, status=201)


@routes.route("GET", "/v1/namespaces/{ns}/tokens", "The namespace's live tokens", answer=TokenList)
async def list_tokens(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(TokenList(await request.app[ACCESS].list_tokens(ns.name)))


@routes.route("DELETE", "/v1/namespaces/{ns}/tokens/{id}", "Revoke a token", answer=Token)
async def revoke_token(request: web.Request) -> web.Response:
    ns = await namespace(request)
    token_id = request.match_info["id"]
    token = await request.app[ACCESS].revoke_token(ns.name, token_id)
    if token is None:
        raise TokenNotFound(ns.name, token_id)
    return reply(token)
