"""Row 12: schemathesis over ``/v1/openapi.json`` against a live control plane, bounded:
every operation, positive and negative data, all checks; 0 5xx, every error body in the
API's ``{"error": {"code", "message"}}`` shape."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from typing import Any

import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase
from report import record
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup

#: Examples per operation and generation mode (the whole run stays well under 90 s).
MAX_EXAMPLES = 25
#: Launching daemons on the built-in local provider starts real processes: only invalid
#: launch bodies are generated (rows 13 and 14 cover its fields' bounds).
NEGATIVE_ONLY = {("POST", "/v1/namespaces/{ns}/daemons")}


def _fuzz(base: str, token: str) -> dict[str, Any]:
    schema = schemathesis.openapi.from_url(base + "/v1/openapi.json")
    headers = {"Authorization": f"Bearer {token}"}
    out: dict[str, Any] = {"calls": 0, "statuses": Counter(), "5xx": [], "shape": [], "checks": [],
                           "unsatisfiable": []}  # fmt: skip
    session = requests.Session()
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode is GenerationMode.POSITIVE and (op.method.upper(), op.path) in NEGATIVE_ONLY:
                continue
            fixed = (
                {"ns": "default"} if "{ns}" in op.path and mode is GenerationMode.POSITIVE else None
            )
            out["operation"] = f"{op.method.upper()} {op.path}"
            strategy = op.as_strategy(generation_mode=mode, path_parameters=fixed)

            @hypothesis.settings(
                max_examples=MAX_EXAMPLES,
                database=None,
                deadline=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @hypothesis.given(case=strategy)
            def run(case: schemathesis.Case) -> None:
                response = case.call(base_url=base, headers=headers, session=session, timeout=30)
                out["calls"] += 1
                out["statuses"][response.status_code] += 1
                label = f"{case.method} {case.formatted_path}"
                if response.status_code >= 500:
                    out["5xx"].append((label, response.status_code, response.text[:300]))
                if response.status_code >= 400:
                    try:
                        body = json.loads(response.content)
                        ok = set(body) == {"error"} and set(body["error"]) == {"code", "message"}
                        ok = ok and all(isinstance(v, str) for v in body["error"].values())
                    except (ValueError, TypeError, AttributeError):
                        ok = False
                    # A traceback's own header: a path may say "Traceback" (a namespace the
                    # fuzzer named so), echoed in a 404's message.
                    if not ok or "Traceback (most recent call last)" in response.text:
                        out["shape"].append((label, response.status_code, response.text[:300]))
                try:
                    case.validate_response(response, headers=headers)
                except (AssertionError, FailureGroup) as e:
                    found = re.findall(r"^- (.+)$", str(e), re.MULTILINE) or [type(e).__name__]
                    for title in found:
                        out["checks"].append((title, out["operation"]))

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                out["unsatisfiable"].append(f"{op.method.upper()} {op.path} {mode.value}")
    return out


async def test_schemathesis_finds_no_5xx_and_only_the_error_shape(control_plane, api):
    async with asyncio.timeout(110):
        assert (await api.post("/v1/namespaces/default/queues", {"name": "q"}))[0] == 201
        began = time.monotonic()
        found = await asyncio.to_thread(_fuzz, control_plane.api, control_plane.admin_token)
        took = time.monotonic() - began
        assert (await api.get("/v1/healthz"))[0] == 200
    checks = Counter(title for title, _ in found["checks"])
    where = {t: sorted({op for title, op in found["checks"] if title == t}) for t in checks}
    print(f"{found['calls']} calls in {took:.1f}s: {dict(found['statuses'])}")
    for title, n in checks.most_common():
        print(f"check {title}: {n} on {where[title]}")
    assert not found["5xx"], "\n".join(map(repr, found["5xx"]))
    assert not found["shape"], "\n".join(map(repr, found["shape"]))
    record(
        12,
        "schemathesis",
        tried=f"schemathesis {schemathesis.SCHEMATHESIS_VERSION}: every operation of "
        f"/v1/openapi.json, positive and negative data, {MAX_EXAMPLES} examples each, all "
        f"checks ({found['calls']} calls in {took:.0f}s)",
        passed=True,
        errors_5xx=0,
        note=f"statuses {dict(sorted(found['statuses'].items()))}; every error body in the "
        "shape. Other checks (not this row's criterion; the OpenAPI document's "
        "completeness, lakeshore/http/meta.py): "
        + "; ".join(f"{t} x{n} ({len(where[t])} operations)" for t, n in checks.most_common()),
    )
