"""Provider routes. Unlike the queue routes, a write (``POST``, ``PATCH``, ``DELETE``)
creates an unknown namespace in the caller's org (within ``namespaces_per_org``) instead of
answering 404 — the seed's contract for provider routes. A read never creates anything:
``GET`` on an unknown namespace is 404 ``namespace_not_found``."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from lakeshore.errors import Forbidden
from lakeshore.http.auth import caller, namespace
from lakeshore.http.routes import Routes, decode_body, reply
from lakeshore.http.state import ACCESS, FLEET
from lakeshore.model import Namespace, Provider, ProviderCreate, ProviderKind, ProviderPatch

routes = Routes()
BASE = "/v1/namespaces/{ns}/providers"


class ProviderList(Struct, frozen=True):
    providers: list[Provider]


#: Kinds whose daemons the control plane starts on other machines with its own SSH keys
#: or Slurm account: a tenant's token could otherwise reach any host those open.
_ADMIN_KINDS = frozenset({ProviderKind.SSH, ProviderKind.SLURM})


async def _namespace_for_write(request: web.Request) -> Namespace:
    """The ``:ns`` of a write, created first when unknown.

    Raises:
        QuotaExceeded: creating it would take the caller's org over ``namespaces_per_org``.
        Forbidden: it is another org's.
    """
    return await request.app[ACCESS].namespace_or_create(caller(request), request.match_info["ns"])


def _check_may_configure(request: web.Request, kind: ProviderKind) -> None:
    """Only an admin token adds or changes an ``ssh`` or ``slurm`` provider.

    Raises:
        Forbidden: a namespace's token asked.
    """
    if kind in _ADMIN_KINDS and caller(request).org is not None:
        raise Forbidden(
            f"only an admin token may add or change a provider of kind {kind.value!r}: its "
            "daemons are started on other machines with the control plane's own SSH keys or "
            "Slurm account. Ask an admin (the token `lakeshore server` printed) to add it; "
            "your tokens can then launch daemons on it"
        )


@routes.route(
    "POST",
    BASE,
    "Add a provider (local, external, ssh or slurm)",
    body=ProviderCreate,
    answer=Provider,
    status=201,
)
async def create(request: web.Request) -> web.Response:
    # The body first: a request refused for its body must not have created a namespace.
    body = await decode_body(request, ProviderCreate)
    _check_may_configure(request, body.kind)
    ns = await _namespace_for_write(request)
    return reply(await request.app[FLEET].add_provider(ns.name, body), status=201)


@routes.route("GET", BASE, "The namespace's providers, built-in local first", answer=ProviderList)
async def list_(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(ProviderList(await request.app[FLEET].providers(ns)))


@routes.route("GET", BASE + "/{name}", "One provider", answer=Provider)
async def show(request: web.Request) -> web.Response:
    ns = await namespace(request)
    return reply(await request.app[FLEET].provider(ns, request.match_info["name"]))


@routes.route(
    "PATCH",
    BASE + "/{name}",
    "Replace a provider's config or labels (its kind is fixed)",
    body=ProviderPatch,
    answer=Provider,
)
async def patch(request: web.Request) -> web.Response:
    body = await decode_body(request, ProviderPatch)
    ns = await _namespace_for_write(request)
    fleet = request.app[FLEET]
    _check_may_configure(request, (await fleet.provider(ns, request.match_info["name"])).kind)
    return reply(await fleet.patch_provider(ns.name, request.match_info["name"], body))


@routes.route(
    "DELETE", BASE + "/{name}", "Delete a provider (not the built-in local)", answer=Provider
)
async def delete(request: web.Request) -> web.Response:
    ns = await _namespace_for_write(request)
    return reply(await request.app[FLEET].remove_provider(ns.name, request.match_info["name"]))
