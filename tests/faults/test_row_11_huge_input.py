"""Row 11: huge input. The body limit is exact, a 100 MiB chunked body is refused while it
is still being sent, JSON nested 10^5 deep is a 4xx on every route with a body, and a
5 MiB function result is a clear failed run, never a stuck one."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import msgspec
from polling import eventually
from report import record

from lakeshore.http.app import MAX_BODY_BYTES

Q = "/v1/namespaces/default/queues"
SUBMIT = Q + "/q/invocations"


def _batch_of(size: int) -> bytes:
    """A valid batch of 5 invocations whose JSON is exactly ``size`` bytes."""
    per = size // 5 - 200
    items = [{"fn": "m:f", "args": ["x" * per]} for _ in range(5)]
    raw = msgspec.json.encode({"invocations": items})
    items[-1]["args"][0] += "x" * (size - len(raw))
    raw = msgspec.json.encode({"invocations": items})
    assert len(raw) == size
    return raw


async def test_the_body_limit_is_exact(api):
    async with asyncio.timeout(60):
        assert (await api.post(Q, {"name": "q"}))[0] == 201
        seen: dict[int, int] = {}
        for size in (MAX_BODY_BYTES - 1, MAX_BODY_BYTES, MAX_BODY_BYTES + 1):
            status, body = await api.request("POST", SUBMIT, data=_batch_of(size))
            seen[size - MAX_BODY_BYTES] = status
            if size > MAX_BODY_BYTES:
                assert (status, body["error"]["code"]) == (413, "too_large"), body
            else:
                assert status == 202, body
        assert (await api.get("/v1/healthz"))[0] == 200
    record(
        11,
        "body-limit",
        tried=f"submit bodies of {MAX_BODY_BYTES:,} bytes - 1, exactly and + 1",
        passed=True,
        note=", ".join(f"limit{d:+d}: {s}" for d, s in seen.items()),
    )


async def test_a_100_mib_chunked_body_is_refused_quickly(control_plane):
    """Raw HTTP/1.1: the chunks are sent until the server answers; it must answer 413
    long before 100 MiB went out."""
    url = urlsplit(control_plane.api)
    total, chunk = 100 * 1024 * 1024, b"x" * (64 * 1024)
    async with asyncio.timeout(60):
        async with control_plane.client() as api:
            assert (await api.post(Q, {"name": "q"}))[0] == 201
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(
            f"POST {SUBMIT} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Authorization: Bearer {control_plane.admin_token}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        sent = 0
        began = time.monotonic()

        async def send() -> None:
            nonlocal sent
            try:
                writer.write(b'10\r\n{"invocations":[\r\n')
                while sent < total:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
                    sent += len(chunk)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            except ConnectionError:
                pass  # the server closed the connection after its answer

        sender = asyncio.create_task(send())
        status_line = await reader.readline()
        took = time.monotonic() - began
        head = await reader.readuntil(b"\r\n\r\n")
        fields = dict(h.split(b":", 1) for h in head.split(b"\r\n") if b":" in h)
        length = int({k.lower(): v for k, v in fields.items()}[b"content-length"])
        body = msgspec.json.decode(await reader.readexactly(length))
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        writer.close()
        assert status_line.split()[1] == b"413", status_line
        assert body["error"]["code"] == "too_large", body
        assert sent < total // 4, f"the server read {sent:,} bytes before refusing"
        assert took < 5, f"413 after {took:.2f}s"
    async with control_plane.client() as api:
        assert (await api.get("/v1/healthz"))[0] == 200
    record(
        11,
        "chunked-100MiB",
        tried="a 100 MiB chunked (no Content-Length) submit body, sent until the server answers",
        passed=True,
        note=f"413 after {took:.2f}s with {sent / 2**20:.1f} MiB sent",
    )


async def test_json_nested_100000_deep_is_4xx_on_every_route_with_a_body(api):
    async with asyncio.timeout(60):
        doc = (await api.get("/v1/openapi.json"))[1]
        assert (await api.post(Q, {"name": "q"}))[0] == 201
        deep_list = b"[" * 100_000 + b"]" * 100_000
        deep_obj = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
        tried: list[str] = []
        for path, ops in doc["paths"].items():
            for method, op in ops.items():
                if "requestBody" not in op:
                    continue
                url = path.replace("{ns}", "default").replace("{name}", "q").replace("{id}", "x")
                for raw in (deep_list, deep_obj, b'{"name": ' + deep_list + b"}"):
                    status, body = await api.request(method.upper(), url, data=raw)
                    assert 400 <= status < 500, (method, path, status, body)
                    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
                tried.append(f"{method.upper()} {path}")
        assert len(tried) >= 8, tried
        assert (await api.get("/v1/healthz"))[0] == 200
    record(
        11,
        "nested-1e5",
        tried=f"arrays and objects nested 100,000 deep as the body of {len(tried)} routes",
        passed=True,
        note="all 4xx in the error shape; healthz 200 after",
    )


async def test_a_5_mib_result_is_a_clear_failed_run(plane_factory, daemons_for):
    handle = await plane_factory()
    daemons = daemons_for(handle.plane.nats_url)
    async with asyncio.timeout(90), handle.client() as api:
        assert (await api.post(Q, {"name": "q"}))[0] == 201
        await daemons.start("d0", "q")
        status, answer = await api.post(
            SUBMIT, {"fn": "hostile_targets:big", "args": [1, 5], "max_attempts": 2}
        )
        assert status == 202, answer
        [inv_id] = answer["ids"]

        async def job() -> dict:
            return (await api.get(f"/v1/namespaces/default/jobs/{inv_id}"))[1]

        done = await eventually(
            job,
            until=lambda j: j.get("state") in ("succeeded", "failed", "cancelled"),
            timeout_s=60,
            what=f"job {inv_id} finished",
        )
        assert done["state"] == "failed", done
        assert done["error"]["type"] == "lakeshore.ResultTooLarge", done
        assert "max_payload" in done["error"]["message"]
        status, result = await api.get(f"/v1/namespaces/default/jobs/{inv_id}/result")
        assert status == 200 and result["ok"] is False, result
        stats = (await api.get(Q + "/q/stats"))[1]
        assert (stats["pending"], stats["running"]) == (0, 0), stats
        # The daemon is not stuck: it runs the next one.
        status, answer = await api.post(SUBMIT, {"fn": "fault_targets:work", "args": [2]})
        [nxt] = answer["ids"]
        nxt_job = await eventually(
            lambda: api.get(f"/v1/namespaces/default/jobs/{nxt}"),
            until=lambda a: a[1].get("state") == "succeeded",
            timeout_s=30,
            what="the next job succeeded",
        )
        assert nxt_job[0] == 200
        runs = daemons.executions()
    record(
        11,
        "5MiB-result",
        tried="a function returning 5 MiB (max_attempts 2) on a real daemon, then a normal one",
        passed=True,
        note=f"failed {done['error']['type']} after {done['attempt']} attempt(s), "
        f"{runs.get(1, 0)} execution(s); the daemon ran the next job",
    )
