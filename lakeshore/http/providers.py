"""Provider routes. Unlike the queue routes, these create an unknown namespace (in the
caller's org) instead of answering 404 — the seed's contract for provider routes."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from lakeshore import access
from lakeshore.actors.launcher import AddProvider, RemoveProvider
from lakeshore.errors import AlreadyExists, NamespaceNotFound
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import PLANE
from lakeshore.model import Namespace, Provider, ProviderCreate
from lakeshore.providers import find_provider, list_providers

routes = Routes()
BASE = "/v1/namespaces/{ns}/providers"


class ProviderList(Struct, frozen=True):
    providers: list[Provider]


async def namespace_or_create(request: web.Request) -> Namespace:
    """The path's namespace once authorised; an unknown one is created in the caller's org."""
    try:
        return await namespace(request)
    except NamespaceNotFound:
        pass
    who = caller(request)
    try:
        await request.app[PLANE].access.create_namespace(
            request.match_info["ns"], access.visible_org(who, None)
        )
    except AlreadyExists:
        pass  # created by a concurrent request: authorise against that one below
    return await namespace(request)


@routes.route(
    "POST",
    BASE,
    "Add a provider (local or external)",
    body=ProviderCreate,
    answer=Provider,
    status=201,
)
async def create(request: web.Request) -> web.Response:
    ns = await namespace_or_create(request)
    body = await decode_body(request, ProviderCreate)
    row = await request.app[PLANE].launcher.ask(AddProvider(ns.name, body))
    return reply(row, status=201)


@routes.route("GET", BASE, "The namespace's providers, built-in local first", answer=ProviderList)
async def list_(request: web.Request) -> web.Response:
    ns = await namespace_or_create(request)
    return reply(ProviderList(await list_providers(request.app[PLANE].store, ns)))


@routes.route("GET", BASE + "/{name}", "One provider", answer=Provider)
async def show(request: web.Request) -> web.Response:
    ns = await namespace_or_create(request)
    return reply(await find_provider(request.app[PLANE].store, ns, request.match_info["name"]))


@routes.route(
    "DELETE", BASE + "/{name}", "Delete a provider (not the built-in local)", answer=Provider
)
async def delete(request: web.Request) -> web.Response:
    ns = await namespace_or_create(request)
    row = await request.app[PLANE].launcher.ask(RemoveProvider(ns.name, request.match_info["name"]))
    return reply(row)
