"""Row 15: tenancy on every route, generated from the route table (``GET /v1/openapi.json``):
for every route with ``{ns}``, another org's token is 403, an unknown namespace 404 (the
provider routes' writes create it instead: the seed's contract; no read creates anything),
a token of a sibling namespace (same
org) is allowed, a bad token 401; the refused requests change no row. The same on NATS for
the submit subject."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
from natsauth import ask, asker_inbox, plane_nats
from report import record
from rowcount import row_counts

from lakeshore.code import pack
from lakeshore.model import FastSubmit

#: A valid body for every route that takes one (the test fails on a route missing here).
BODIES = {
    ("post", "/v1/namespaces/{ns}/tokens"): {"description": "from the matrix"},
    ("post", "/v1/namespaces/{ns}/queues"): {"name": "made-by-matrix"},
    ("patch", "/v1/namespaces/{ns}/queues/{name}"): {"description": "patched"},
    ("post", "/v1/namespaces/{ns}/queues/{name}/invocations"): {"fn": "m:f"},
    ("post", "/v1/namespaces/{ns}/jobs/{id}/retry"): {},
    ("post", "/v1/namespaces/{ns}/workers/{id}/queues"): {"add": ["q"]},
    ("patch", "/v1/namespaces/{ns}/workers/{id}"): {"labels": {"team": "matrix"}},
    ("post", "/v1/namespaces/{ns}/daemons"): {"name": "dd", "provider": "p"},
    ("post", "/v1/namespaces/{ns}/daemons/join"): {},
    ("post", "/v1/namespaces/{ns}/providers"): {"name": "p2", "kind": "external"},
    ("patch", "/v1/namespaces/{ns}/providers/{name}"): {"labels": {"team": "matrix"}},
}


#: A code snapshot each org stores (the same files: the same digest in both buckets).
SNAPSHOT = pack(Path(__file__).parent / "tenancy_code")
#: Routes whose body is not JSON: a code snapshot's tar.
RAW_BODIES = {("put", "/v1/namespaces/{ns}/code/{digest}"): SNAPSHOT.data}


#: Sibling requests whose route answers for its own reasons (not tenancy).
OWN_ANSWERS = {
    ("post", "/v1/namespaces/{ns}/daemons", "conflict"),  # external: started by hand
    ("delete", "/v1/namespaces/{ns}/queues/{name}", "queue_has_members"),  # w was added
}


def _routes(doc: dict) -> list[tuple[str, str]]:
    """(method, path) of every route with ``{ns}``, deletes last (they remove the fixtures)."""
    out = [(method, path) for path, ops in doc["paths"].items() if "{ns}" in path for method in ops]
    return sorted(out, key=lambda r: r[0] == "delete")


def _fill(path: str, ns: str, ids: dict[str, str]) -> str:
    """The path's parameters: the queue ``q``, provider ``p``, per resource the id of
    the namespace's job, worker or token, and the digest of its org's code snapshot."""
    url = path.replace("{ns}", ns).replace("{digest}", SNAPSHOT.digest)
    if "/providers/" in path:
        url = url.replace("{name}", "p")
    url = url.replace("{name}", "q")
    for resource in ("jobs", "workers", "tokens"):
        url = url.replace(f"/{resource}/{{id}}", f"/{resource}/{ids.get(resource, 'none')}")
    return url


async def test_the_tenancy_matrix_of_every_route(control_plane, api, register, nats_server):
    plane = control_plane.plane
    async with asyncio.timeout(120):
        ids: dict[str, dict[str, str]] = {}
        for ns, org in (("alpha", "acme"), ("alpha2", "acme"), ("beta", "other")):
            assert (await api.post("/v1/namespaces", {"name": ns, "org": org}))[0] == 201
            base = f"/v1/namespaces/{ns}"
            assert (await api.post(base + "/queues", {"name": "q"}))[0] == 201
            body = {"name": "p", "kind": "external"}
            assert (await api.post(base + "/providers", body))[0] == 201
            job = (await api.post(base + "/queues/q/invocations", {"fn": "m:f"}))[1]["ids"][0]
            worker = await register("w", namespace=ns)
            token = (await api.post(base + "/tokens", {"description": "t"}))[1]
            ids[ns] = {"jobs": job, "workers": worker.id, "tokens": token["id"]}
            ids[ns]["secret"] = token["token"]
            code = await api.request("PUT", f"{base}/code/{SNAPSHOT.digest}", data=SNAPSHOT.data)
            assert code[0] in (200, 201), code
        for ns, of in ids.items():  # reading a job waits until its history is appended
            assert (await api.get(f"/v1/namespaces/{ns}/jobs/{of['jobs']}"))[0] == 200
        ta, tb = ids["alpha"]["secret"], ids["beta"]["secret"]
        doc = (await api.get("/v1/openapi.json"))[1]
        routes = _routes(doc)
        missing = [
            r for r in routes if "requestBody" in doc["paths"][r[1]][r[0]] and r not in BODIES
        ]
        assert not missing, f"routes without a body in the matrix: {missing}"
        assert len(routes) >= 25, routes

        async def call(method: str, path: str, ns: str, token: str | None):
            url = _fill(path, ns, ids.get(ns, {}))
            if (method, path) in RAW_BODIES:
                data = RAW_BODIES[(method, path)]
                return await api.request(method.upper(), url, data=data, token=token)
            body = BODIES.get((method, path))
            return await api.request(method.upper(), url, json=body, token=token)

        # The refused: nothing they do may change a row.
        before = await row_counts(plane.parts.store)
        wrong: list[tuple] = []
        refused = 0
        for method, path in routes:
            provider_route = "/providers" in path
            expect = [("bad-token", "alpha", "lsk_not-a-token", 401),
                      ("no-token", "alpha", None, 401),
                      ("other-org", "alpha", tb, 403),
                      ("other-org-reverse", "beta", ta, 403)]  # fmt: skip
            if not provider_route or method == "get":
                expect.append(("unknown-ns", "nope", ta, 404))
            for case, ns, token, status in expect:
                got, body = await call(method, path, ns, token)
                refused += 1
                if got != status or set(body) != {"error"}:
                    wrong.append((case, method, path, got, body))
        after = await row_counts(plane.parts.store)
        assert not wrong, "\n".join(map(repr, wrong))
        assert after == before, {t: (before[t], after[t]) for t in before if before[t] != after[t]}

        # Provider routes' writes create an unknown namespace, in the caller's org.
        writes = (r for r in routes if "/providers" in r[1] and r[0] != "get")
        for i, (method, path) in enumerate(writes):
            got, body = await call(method, path, f"nope-{i}", ta)
            assert got not in (401, 403), (method, path, got, body)
            shown = (await api.get(f"/v1/namespaces/nope-{i}"))[1]
            assert shown["org"] == "acme", (method, path, shown)

        # A sibling namespace's token (same org) is allowed on every route: 2xx, or the
        # route's own answer (an external provider launches nothing: 409), never a refusal.
        sibling: list[tuple] = []
        allowed = 0
        for method, path in routes:
            got, body = await call(method, path, "alpha2", ta)
            code = (body.get("error") or {}).get("code") if isinstance(body, dict) else None
            if got in (401, 403) or code == "namespace_not_found":
                sibling.append((method, path, got, body))
            elif 200 <= got < 300:
                allowed += 1
            else:
                assert (method, path, code) in OWN_ANSWERS, (method, path, got, body)
        assert not sibling, "\n".join(map(repr, sibling))

        # NATS: the submit subject checks the same token against the same namespace.
        nc = await plane_nats(plane.nats_url)
        try:
            before = await row_counts(plane.parts.store)
            answers = {}
            for case, ns, token, code in [
                ("other-org", "alpha", tb, "forbidden"),
                ("bad-token", "alpha", "lsk_nope", "unauthorized"),
                ("unknown-ns", "nope", ta, "namespace_not_found"),
            ]:
                msg = FastSubmit(token=token, invocations=[{"fn": "m:f"}])  # type: ignore[list-item]
                subject = f"ls.{ns}.submit.q"
                inbox = asker_inbox(subject, msg)
                reply = await ask(nc, subject, msgspec.json.encode(msg), inbox=inbox)
                answers[case] = msgspec.json.decode(reply.data)
                assert answers[case]["error"]["code"] == code, answers
            assert await row_counts(plane.parts.store) == before
            msg = FastSubmit(token=ta, invocations=[{"fn": "m:f"}])  # type: ignore[list-item]
            subject = "ls.alpha2.submit.q"
            inbox = asker_inbox(subject, msg)
            reply = await ask(nc, subject, msgspec.json.encode(msg), inbox=inbox)
            assert len(msgspec.json.decode(reply.data)["ids"]) == 1
        finally:
            await nc.close()
    record(
        15,
        "tenancy-matrix",
        tried=f"{len(routes)} routes with {{ns}} from the OpenAPI document x (bad token, no "
        "token, other org both ways, unknown namespace), then a sibling-namespace token on "
        "each; the NATS submit subject likewise",
        passed=True,
        note=f"{refused} refused requests, 0 rows changed; provider routes auto-create in "
        f"the caller's org; the sibling token allowed on every route ({allowed} 2xx, the "
        "rest the route's own 409)",
    )
