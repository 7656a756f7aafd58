"""Row 14: numbers out of range in every numeric field of every request body and query
parameter. The matrix is generated from the msgspec request types the routes declare
(``GET /v1/openapi.json`` names them) and the Elasticity object: each out-of-range value is a
400 whose message names the field and the bound it broke, changes nothing, and crashes no
actor (``/v1/healthz`` stays 200). ``tests/http/test_bounds.py`` pins a few by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import msgspec
import msgspec.inspect as mi
from report import record

from lakeshore.http.app import ROUTE_MODULES
from lakeshore.http.invocations import MAX_WAIT_S
from lakeshore.http.query import MAX_LIMIT
from lakeshore.model import DaemonLaunch, QueueCreate, QueuePatch, SubmitBatch
from lakeshore.model.invocations import InvocationSubmit
from lakeshore.model.queues import Elasticity

NS = "/v1/namespaces/default"
Q = NS + "/queues"

#: (route, base body, the request type the route decodes): every body with a number.
BODIES: list[tuple[str, str, dict[str, Any], type]] = [
    ("POST", Q, {"name": "n14"}, QueueCreate),
    ("PATCH", Q + "/q14", {}, QueuePatch),
    ("POST", Q + "/q14/invocations", {"fn": "m:f"}, InvocationSubmit),
    ("POST", Q + "/q14/invocations", {"invocations": [{"fn": "m:f"}]}, SubmitBatch),
    ("POST", NS + "/daemons", {"name": "d14", "provider": "ext"}, DaemonLaunch),
]
#: The elasticity object travels as a dict in create and patch bodies.
ELASTICITY = [("POST", Q, {"name": "n14"}), ("PATCH", Q + "/q14", {})]
#: (route, parameter, lowest, highest)
QUERIES = [
    ("GET", NS + "/jobs", "limit", 1, MAX_LIMIT),
    ("GET", Q + "/q14/events", "limit", 1, MAX_LIMIT),
    ("POST", Q + "/q14/invocations", "wait_s", 0, MAX_WAIT_S),
    ("GET", NS + "/jobs/{job}/result", "wait_s", 0, MAX_WAIT_S),
]


def _numbers(t: mi.Type, path: tuple) -> Iterator[tuple[tuple, mi.IntType | mi.FloatType]]:
    """Every bounded int or float field under ``t``, with its JSON path."""
    if isinstance(t, (mi.IntType, mi.FloatType)):
        yield path, t
    elif isinstance(t, mi.UnionType):
        for member in t.types:
            yield from _numbers(member, path)
    elif isinstance(t, mi.ListType):
        yield from _numbers(t.item_type, (*path, 0))
    elif isinstance(t, mi.StructType):
        for f in t.fields:
            yield from _numbers(f.type, (*path, f.encode_name))


def _out_of_range(t: mi.IntType | mi.FloatType) -> list[tuple[float, float | int]]:
    """(value, the bound it breaks) for each side that has a bound, and the row's giants."""
    low = t.ge if t.ge is not None else t.gt
    high = t.le if t.le is not None else t.lt
    values: list[tuple[float, float | int]] = []
    if low is not None:
        values.append((low - 1 if t.ge is not None else low, low))
        values += [(v, low) for v in (-1, -(2**31), -(2**63)) if v < low]
    if high is not None:
        step = 1 if isinstance(t, mi.IntType) else high * 0.001
        values.append((high + step, high))
        giants = (2**31, 2**63 - 1, 2**63, 10**20, 10**30)
        if isinstance(t, mi.FloatType):
            giants += (1e300,)
        values += [(v, high) for v in giants if v > high]
    return values


def _put(body: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    body = msgspec.json.decode(msgspec.json.encode(body))
    at: Any = body
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return body


def _matrix() -> list[tuple[str, str, dict[str, Any], str, float, float]]:
    cases = []
    for method, url, base, type_ in BODIES:
        for path, t in _numbers(mi.type_info(type_), ()):
            for value, bound in _out_of_range(t):
                cases.append((method, url, _put(base, path, value), path[-1], value, bound))
    for method, url, base in ELASTICITY:
        for path, t in _numbers(mi.type_info(Elasticity), ("elasticity",)):
            for value, bound in _out_of_range(t):
                body = {**base, "elasticity": {path[-1]: value}}
                cases.append((method, url, body, path[-1], value, bound))
    return cases


def _bound_named(message: str, bound: float) -> bool:
    forms = {str(bound), f"{bound:g}", repr(float(bound)), str(int(bound))}
    return any(f in message for f in forms)


def test_the_matrix_covers_every_route_body_with_a_number():
    declared = {d.body for m in ROUTE_MODULES for d in m.routes.docs if d.body is not None}
    with_numbers = {t for t in declared if any(_numbers(mi.type_info(t), ()))}
    assert with_numbers <= {t for *_, t in BODIES}, with_numbers


async def test_every_out_of_range_number_is_400_naming_field_and_bound(api):
    async with asyncio.timeout(90):
        assert (await api.post(Q, {"name": "q14", "max_depth": 5}))[0] == 201
        assert (await api.post(NS + "/providers", {"name": "ext", "kind": "external"}))[0] == 201
        before = (await api.get(Q + "/q14"))[1]
        status, answer = await api.post(Q + "/q14/invocations", {"fn": "m:f"})
        assert status == 202
        [job] = answer["ids"]
        wrong: list[tuple] = []
        cases = _matrix()
        for method, url, body, field, value, bound in cases:
            status, answer = await api.request(method, url, json=body)
            msg = answer.get("error", {}).get("message", "") if isinstance(answer, dict) else ""
            if status != 400 or field not in msg or not _bound_named(msg, bound):
                wrong.append((method, url, field, value, status, msg))
        queries = 0
        for method, url, param, low, high in QUERIES:
            giants = ["2147483648", "9223372036854775808", "1e400", "nan", "inf", "-inf", "²"]
            for raw in [str(low - 1), str(high + 1), str(-(2**63)), *giants]:
                queries += 1
                full = url.replace("{job}", job) + f"?{param}={raw}"
                status, answer = await api.request(method, full, json={"fn": "m:f"})
                msg = answer.get("error", {}).get("message", "") if isinstance(answer, dict) else ""
                named = param in msg and f"{low:g}" in msg and f"{high:g}" in msg
                if status != 400 or not named:
                    wrong.append((method, full, param, raw, status, msg))
        assert not wrong, "\n".join(map(repr, wrong))
        # Nothing changed, nothing crashed.
        assert (await api.get(Q + "/q14"))[1] == before
        assert (await api.get(Q + "/n14"))[0] == 404
        assert (await api.get(NS + "/workers"))[1]["workers"] == []
        assert (await api.get("/v1/healthz"))[0] == 200
        assert (await api.post(Q + "/q14/invocations", {"fn": "m:f"}))[0] == 202
    record(
        14,
        "numbers",
        tried=f"{len(cases)} out-of-range values in every numeric field of the request types "
        f"(QueueCreate, QueuePatch, Elasticity, InvocationSubmit, SubmitBatch, DaemonLaunch) and "
        f"{queries} in the limit / wait_s query parameters",
        passed=True,
        note="all 400 naming the field and the bound broken; row unchanged; healthz 200",
    )
