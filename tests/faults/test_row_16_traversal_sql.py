"""Row 16: path traversal and SQL in every parameter of every route (path and query
parameters from ``GET /v1/openapi.json``, and the name fields of the bodies): no 2xx, no
file written outside Lakeshore's own, no row changed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp
import msgspec
import yarl
from report import record
from rowcount import row_counts

#: Each reaches the server as written here (already percent-encoded where it says so).
PAYLOADS = [
    "..%2F",
    "..%2F..%2F..%2F..%2Ftmp%2Flakeshore-row16",
    "%2e%2e",
    "%252e%252e%252f",
    "..%5C..%5C",
    "%27%20OR%201%3D1%20--",
    "%3BDROP%20TABLE%20queues",
    "q%27%3B%20DROP%20TABLE%20queues%3B%20--",
    "%22%29%3B%20DELETE%20FROM%20tokens%3B%20--",
    "..",
]
#: The same, decoded, for JSON bodies.
BODY_PAYLOADS = ["../", "../../../../tmp/lakeshore-row16", "' OR 1=1 --", ";DROP TABLE queues",
                 "q'; DROP TABLE queues; --", "\\..\\..", "..", "%2e%2e"]  # fmt: skip
#: Body fields that name things (free text, such as a description, may hold anything).
NAME_FIELDS = {
    ("post", "/v1/namespaces"): [{"name": "{}", "org": "acme"}, {"name": "ok-ns", "org": "{}"}],
    ("post", "/v1/namespaces/{ns}/queues"): [{"name": "{}"}],
    ("post", "/v1/namespaces/{ns}/providers"): [{"name": "{}", "kind": "external"}],
    ("post", "/v1/namespaces/{ns}/daemons"): [
        {"name": "{}", "provider": "p"}, {"name": "d", "provider": "{}"},
        {"name": "d", "provider": "p", "queues": ["{}"]},
    ],
    ("post", "/v1/namespaces/{ns}/workers/{id}/queues"): [{"add": ["{}"]}, {"remove": ["{}"]}],
    ("post", "/v1/namespaces/{ns}/queues/{name}/invocations"): [{"fn": "m:f"}],
}  # fmt: skip
#: A harmless body for the other routes that take one.
OTHER_BODIES = {
    ("post", "/v1/namespaces/{ns}/tokens"): {"description": "x"},
    ("patch", "/v1/namespaces/{ns}/queues/{name}"): {"description": "x"},
    ("patch", "/v1/namespaces/{ns}/workers/{id}"): {"labels": {"k": "x"}},
}


def _files(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath) / n
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _lakeshores(path: str) -> bool:
    """Lakeshore's own files in its data dir: the store, its WAL, daemon logs, config."""
    return "lakeshore.duckdb" in path or "/daemons/" in path or path.endswith("daemons")


async def test_traversal_and_sql_in_every_parameter(control_plane, api, register, tmp_path):
    plane = control_plane.plane
    async with asyncio.timeout(120):
        assert (await api.post("/v1/namespaces/default/queues", {"name": "q"}))[0] == 201
        provider = {"name": "p", "kind": "external"}
        assert (await api.post("/v1/namespaces/default/providers", provider))[0] == 201
        job = (await api.post("/v1/namespaces/default/queues/q/invocations", {"fn": "m:f"}))[1]
        worker = await register("w")
        doc = (await api.get("/v1/openapi.json"))[1]
        real = {"ns": "default", "name": "q", "id": job["ids"][0]}

        def fill(path: str, values: dict[str, str]) -> str:
            if "/workers/" in path:
                values = {"id": worker.id, **values}
            if "/providers/" in path:
                values = {"name": "p", **values}
            for k, v in {**real, **values}.items():
                path = path.replace("{" + k + "}", v)
            return path

        # Reading the job waits until its history is appended (the Recorder appends behind).
        assert (await api.get(f"/v1/namespaces/default/jobs/{job['ids'][0]}"))[0] == 200
        files_before = _files(tmp_path)
        rows_before = await row_counts(plane.parts.store)
        sent: list[tuple[str, str, int]] = []
        async with aiohttp.ClientSession() as session:

            async def send(method: str, url: str, body: object) -> None:
                headers = {"Authorization": f"Bearer {control_plane.admin_token}"}
                data = msgspec.json.encode(body) if body is not None else None
                target = yarl.URL(control_plane.api + url, encoded=True)
                async with session.request(method.upper(), target, data=data, headers=headers) as r:
                    await r.read()
                    sent.append((method.upper(), url, r.status))

            for path, ops in doc["paths"].items():
                for method, op in ops.items():
                    params = op.get("parameters", [])
                    named = NAME_FIELDS.get((method, path)) or [None]
                    body = OTHER_BODIES.get((method, path)) or named[0]
                    if body is not None and "{}" in msgspec.json.encode(body).decode():
                        body = msgspec.json.decode(
                            msgspec.json.encode(body).decode().replace("{}", "ok").encode()
                        )
                    for param in params:
                        for payload in PAYLOADS:
                            if param["in"] == "path":
                                url = fill(path, {param["name"]: payload})
                            else:
                                url = fill(path, {}) + f"?{param['name']}={payload}"
                            await send(method, url, body)
                    for template in NAME_FIELDS.get((method, path), []):
                        if "{}" not in msgspec.json.encode(template).decode():
                            continue
                        for payload in BODY_PAYLOADS:
                            raw = msgspec.json.encode(template).decode()
                            text = raw.replace('"{}"', msgspec.json.encode(payload).decode())
                            await send(method, fill(path, {}), msgspec.json.decode(text))
        ok = [s for s in sent if 200 <= s[2] < 300]
        errors_5xx = [s for s in sent if s[2] >= 500]
        assert not ok and not errors_5xx, "\n".join(map(repr, ok + errors_5xx))
        assert await row_counts(plane.parts.store) == rows_before
        changed = {
            p: v
            for p, v in _files(tmp_path).items()
            if files_before.get(p) != v and not _lakeshores(p)
        }
        assert not changed, changed
        assert not Path("/tmp/lakeshore-row16").exists()
        assert (await api.get("/v1/healthz"))[0] == 200
    record(
        16,
        "traversal-sql",
        tried=f"{len(sent)} requests: {len(PAYLOADS)} traversal / SQL payloads in every path "
        "and query parameter of every route, and in the name fields of the bodies",
        passed=True,
        errors_5xx=len(errors_5xx),
        note=f"0 2xx (statuses {sorted({s[2] for s in sent})}); 0 rows changed; no file "
        "written outside the store",
    )
