"""Row 13: hostile names on every route that takes a name, and in the CLI.

Each bad name must be refused with a 4xx (never 2xx, never a 5xx: no NATS error caused by
a name), and the CLI must exit 2 before any network call for a bad queue name.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from urllib.parse import quote

import aiohttp
import msgspec
import pytest
import yarl
from click.testing import CliRunner
from report import record

from lakeshore.cli.main import lakeshore

NS = "/v1/namespaces"
Q = NS + "/default/queues"

#: name -> what it tries.
BAD = {
    "dot": ".",
    "star": "*",
    "gt": ">",
    "space": "a b",
    "slash": "a/b",
    "dotdot": "..",
    "nul": "a\x00b",
    "upper": "Abc",
    "long-64": "a" * 64,
    "cyrillic-a": "\u0430bc",
    "fullwidth": "\uff41bc",
    "dotted": "a.b",
    "empty": "",
}
CASES = [*BAD, "newline", "trailing-dash"]
ALL = {**BAD, "newline": "abc\n", "trailing-dash": "a-"}


def _requests(bad: str) -> list[tuple[str, str, object]]:
    """Every route and body field that takes a name, with ``bad`` in it."""
    p = quote(bad, safe="")
    out: list[tuple[str, str, object]] = [
        ("POST", NS, {"name": bad, "org": "acme"}),
        ("POST", NS, {"name": "fine-ns", "org": bad}),
        ("POST", Q, {"name": bad}),
        ("POST", Q, {"name": "fine", "elasticity": {"pool": bad}}),
        ("POST", Q, {"name": "fine", "elasticity": {"provider": bad}}),
        ("GET", f"{NS}/default/providers/{p}", None),
        ("POST", f"{NS}/default/providers", {"name": bad, "kind": "external"}),
        ("POST", f"{NS}/default/daemons", {"name": bad, "provider": "external-p"}),
        ("POST", f"{NS}/default/daemons", {"name": "d", "queues": [bad], "provider": "external-p"}),
        ("POST", f"{NS}/default/daemons", {"name": "d", "provider": bad}),
        ("POST", f"{NS}/default/workers/w1/queues", {"add": [bad]}),
        ("POST", f"{NS}/default/workers/w1/queues", {"remove": [bad]}),
        ("GET", f"{NS}/default/jobs?queue={p}", None),
        ("POST", f"{Q}/{p}/invocations", {"fn": "m:f"}),
    ]
    for method, tail in [
        ("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/drain"), ("POST", "/archive"),
        ("POST", "/unarchive"), ("GET", "/events"), ("GET", "/stats"),
    ]:  # fmt: skip
        out.append((method, f"{Q}/{p}{tail}", {"description": "x"} if method == "PATCH" else None))
    for method, tail in [
        ("GET", ""), ("GET", "/queues"), ("GET", "/jobs"), ("GET", "/workers"),
        ("GET", "/providers"), ("POST", "/queues"), ("GET", "/tokens"), ("GET", "/controller"),
    ]:  # fmt: skip
        body = {"name": "fine"} if method == "POST" else None
        out.append((method, f"{NS}/{p}{tail}", body))
    if not bad:  # an empty org or ?queue= is "not given" (the caller's org, every queue)
        out = [r for r in out if r[2] != {"name": "fine-ns", "org": ""} and "queue=" not in r[1]]
    return out


async def _send(session, base, token, method, path, body) -> tuple[int, object]:
    url = yarl.URL(base + path, encoded=True)  # '..' and '%2F' reach the server as sent
    headers = {"Authorization": f"Bearer {token}"}
    data = msgspec.json.encode(body) if body is not None else None
    async with session.request(method, url, data=data, headers=headers) as r:
        raw = await r.read()
        return r.status, msgspec.json.decode(raw) if raw else None


@pytest.mark.parametrize("case", CASES)
async def test_a_bad_name_is_4xx_on_every_route(control_plane, js, register, case):
    bad = ALL[case]
    await register("w1", queues=["fine"])
    answers: list = []
    passed = False
    try:
        await _http_case(control_plane, js, bad, answers)
        passed = True
    finally:
        record(
            13,
            f"http-{case}",
            tried=f"the name {bad!r} in {len(answers)} requests: every route and body field "
            "that takes a queue, namespace, org, provider, pool, daemon or worker-queue name",
            passed=passed,
            errors_5xx=sum(a[3] >= 500 for a in answers),
            note=f"statuses {sorted({a[3] for a in answers})}; no stream made; healthz 200"
            if passed
            else f"failed; statuses {sorted({a[3] for a in answers})}",
        )


async def _http_case(control_plane, js, bad: str, answers: list) -> None:
    async with asyncio.timeout(60), aiohttp.ClientSession() as session:
        status, _ = await _send(
            session, control_plane.api, control_plane.admin_token, "POST",
            f"{NS}/default/providers", {"name": "external-p", "kind": "external"},
        )  # fmt: skip
        assert status == 201
        streams_before = {s.config.name for s in await js.streams_info()}
        for method, path, body in _requests(bad):
            status, answer = await _send(
                session, control_plane.api, control_plane.admin_token, method, path, body
            )
            answers.append((method, path, body, status, answer))
        bad_answers = [a for a in answers if not 400 <= a[3] < 500]
        assert not bad_answers, bad_answers
        for *_, answer in answers:
            assert set(answer) == {"error"} and set(answer["error"]) == {"code", "message"}
        new_streams = {s.config.name for s in await js.streams_info()} - streams_before
        assert not new_streams, new_streams
        status, _ = await _send(session, control_plane.api, None, "GET", "/v1/healthz", None)
        assert status == 200


class _Listener:
    """A TCP port that counts the connections made to it (the CLI's API)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.1)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _cli_commands(bad: str) -> list[list[str]]:
    return [
        ["queues", "add", bad],
        ["queues", "show", bad],
        ["queues", "patch", bad, "--description", "x"],
        ["queues", "rm", bad],
        ["queues", "drain", bad],
        ["submit", "--queue", bad, "--", "echo", "hi"],
        ["jobs", "ls", "--queue", bad],
        ["daemon", "launch", "--name", "d", "--queue", bad],
        ["daemon", "update", "d", "--add-queue", bad],
    ]


@pytest.mark.parametrize(
    "case",
    [
        *[c for c in BAD if c != "empty"],
        "newline",
        "trailing-dash",
    ],
)
def test_the_cli_exits_2_before_any_network_call(case, monkeypatch):
    bad = ALL[case]
    listener = _Listener()
    monkeypatch.delenv("LAKESHORE_CONFIG", raising=False)
    results: list = []
    passed = False
    try:
        runner = CliRunner()
        for argv in _cli_commands(bad):
            done = runner.invoke(lakeshore, ["--api", listener.url, "--token", "t", *argv])
            results.append((argv, done.exit_code, done.output[-300:]))
        wrong = [r for r in results if r[1] != 2]
        assert not wrong, wrong
        assert all("queue" in out.lower() for *_, out in results), results
        assert listener.accepted == 0
        passed = True
    finally:
        listener.close()
        record(
            13,
            f"cli-{case}",
            tried=f"the queue name {bad!r} in {len(results)} CLI commands (queues add/show/"
            "patch/rm/drain, submit, jobs ls, daemon launch/update) against a counting listener",
            passed=passed,
            note="all exit 2, 0 connections"
            if passed
            else f"failed; exit codes "
            f"{sorted({r[1] for r in results})}, {listener.accepted} connection(s)",
        )
