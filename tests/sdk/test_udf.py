"""``@udf`` and ``Invocation`` against the real control plane, and with a real daemon
(a ``lakeshore daemon run`` subprocess importing ``udf_targets``) for results.

The synchronous SDK blocks its caller while its own loop thread talks to the control
plane, which serves on the test's loop; so synchronous calls run on a worker thread.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import udf_targets
from aiohttp import web
from support import daemon_process

import lakeshore
import lakeshore.sdk.udf as udf_module
from lakeshore import errors
from lakeshore.config import ClientSettings
from lakeshore.model import Invocation as Stored
from lakeshore.model import InvocationSubmit
from lakeshore.sdk import Client, Invocation, JobCancelled, configure, sync
from lakeshore.sdk.fastpath import FastPath
from lakeshore.sdk.invocation import MIN_POLL_S, wait_result
from lakeshore.sdk.udf import function_ref, udf

Q = "/v1/namespaces/default/queues"
STREAM = f"LS_default_{udf_targets.QUEUE}"


class RecordingFastPath(FastPath):
    """A real fast path that also keeps the batches it was asked to submit."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.batches: list[list[InvocationSubmit]] = []

    async def submit(self, queue: str, invocations: list[InvocationSubmit], **kw: Any) -> Any:
        self.batches.append(invocations)
        return await super().submit(queue, invocations, **kw)


class RecordingClient(Client):
    """A real client that also keeps every request body it sent (HTTP), and every batch
    it submitted (over NATS or HTTP)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[str, str, Any]] = []
        self.fast = RecordingFastPath(self, args[1] if len(args) > 1 else kwargs.get("token"))

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.sent.append((method, path, kw.get("json")))
        return await super().request(method, path, **kw)


@pytest.fixture
def sdk(control_plane) -> Iterator[RecordingClient]:
    """The SDK's default client pointed at the control plane; reset afterwards."""
    client = RecordingClient(control_plane.api, control_plane.admin_token)
    configure(client)
    try:
        yield client
    finally:
        configure()
        sync.close()


@pytest.fixture
async def queue(api) -> str:
    status, body = await api.post(Q, {"name": udf_targets.QUEUE})
    assert status == 201, body
    return udf_targets.QUEUE


async def stored(js, stream: str = STREAM) -> list[Stored]:
    info = await js.stream_info(stream)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        out.append(msgspec.json.decode(msg.data, type=Stored))
    return out


# ---- the decorator ------------------------------------------------------------------


def test_fn_is_the_module_and_qualname_of_the_function():
    assert udf_targets.double.ref == "udf_targets:double"
    assert udf_targets.adouble.ref == "udf_targets:adouble"
    assert (udf_targets.double.__name__, udf_targets.double.__module__) == (
        "double",
        "udf_targets",
    )


def test_the_decorated_function_stays_callable_locally():
    assert udf_targets.double(21) == 42
    assert udf_targets.pair(1, b=(2, 3)) == (1, (2, 3))


def test_udf_refuses_lambdas():
    with pytest.raises(TypeError, match="cannot take a lambda: the daemon imports"):
        udf(queue="q")(lambda x: x)


class Tasks:
    def method(self, x):
        return x


def test_udf_refuses_nested_functions_and_methods():
    def inner(x):
        return x

    with pytest.raises(TypeError, match=r"nested function '.*<locals>.inner'.*module level"):
        udf(queue="q")(inner)
    with pytest.raises(TypeError, match="cannot take the method 'Tasks.method'"):
        function_ref(Tasks.method)
    with pytest.raises(TypeError, match="needs a function defined with def"):
        udf(queue="q")(len)


def test_bad_options_fail_at_decoration_naming_the_option():
    with pytest.raises(ValueError, match=r"invalid @udf option for udf_targets:double.*priority"):
        udf_targets.double.options(priority=10)
    with pytest.raises(ValueError, match="max_attempts"):
        udf(queue="q", max_attempts=0)(udf_targets.double.fn)
    with pytest.raises(
        ValueError, match=r"udf_targets:double: stop_grace_s must be between 0 and 3600 seconds"
    ):
        udf(queue="q", stop_grace_s=5000)(udf_targets.double.fn)
    with pytest.raises(TypeError, match="unknown udf option"):
        udf_targets.double.options(colour="red")


async def test_a_script_function_is_named_by_the_scripts_module(tmp_path: Path):
    script = tmp_path / "tasks.py"
    script.write_text(
        textwrap.dedent(
            """
            from lakeshore import udf

            @udf(queue="cpu-prep")
            def double(x):
                return 2 * x

            print(double.ref)
            """
        )
    )
    for argv in ([str(script)], ["-m", "tasks"]):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *argv,
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert (proc.returncode, out.decode().strip()) == (0, "tasks:double"), err.decode()


def test_local_runs_in_process_with_json_arguments_and_value():
    udf_targets.CALLS.clear()
    assert udf_targets.record.local({"k": (1, 2)}) == os.getpid()
    assert udf_targets.CALLS == [{"k": [1, 2]}]
    assert udf_targets.pair.local(1, b=(2, 3)) == [1, [2, 3]]
    assert udf_targets.adouble.local(4) == 8
    with pytest.raises(ValueError, match="boom"):
        udf_targets.fail.local("boom")


def test_arguments_that_are_not_json_are_refused_before_sending():
    with pytest.raises(TypeError, match=r"argument 0 of udf_targets:double cannot be sent"):
        udf_targets.double.submit(object())
    with pytest.raises(TypeError, match=r"keyword argument 'b' of udf_targets:pair"):
        udf_targets.pair.local(1, b={1, object()})
    with pytest.raises(TypeError, match=r"map item 2: argument 0 of udf_targets:double"):
        udf_targets.double.map([1, 2, object()])


# ---- submitting ---------------------------------------------------------------------


async def test_submit_puts_the_invocation_on_the_queue(sdk, queue, js):
    inv = await asyncio.to_thread(udf_targets.pair.submit, {"lr": 3e-4}, b=[1, 2])
    assert isinstance(inv, Invocation)
    assert (inv.queue, inv.namespace) == (queue, "default")
    [msg] = await stored(js)
    assert (msg.id, msg.fn, msg.args, msg.kwargs) == (
        inv.id,
        "udf_targets:pair",
        [{"lr": 3e-4}],
        {"b": [1, 2]},
    )
    assert (msg.max_attempts, msg.timeout_s, msg.priority) == (2, 30.0, 0)


async def test_submit_reports_the_servers_warnings(sdk, queue):
    inv = await asyncio.to_thread(udf_targets.double.submit, 1)
    assert [w.split(":")[0] for w in inv.warnings] == ["no_members"]


async def test_asubmit_does_not_block_the_callers_loop(sdk, queue, js):
    inv = await udf_targets.double.asubmit(5)
    assert [(m.id, m.args) for m in await stored(js)] == [(inv.id, [5])]


async def test_map_sends_one_batch(sdk, queue, js):
    invs = await asyncio.to_thread(udf_targets.double.map, range(250))
    assert [len(batch) for batch in sdk.fast.batches] == [250]
    assert [m.id for m in await stored(js)] == [i.id for i in invs]
    assert [m.args for m in await stored(js)] == [[i] for i in range(250)]


async def test_map_splits_batches_at_the_limit(sdk, queue, js, monkeypatch):
    monkeypatch.setattr(udf_module, "MAX_BATCH", 4)
    invs = await asyncio.to_thread(udf_targets.double.map, range(10))
    assert [len(batch) for batch in sdk.fast.batches] == [4, 4, 2]
    assert [m.id for m in await stored(js)] == [i.id for i in invs]


def test_map_of_nothing_sends_nothing(sdk):
    assert udf_targets.double.map([]) == []
    assert sdk.sent == []


async def test_options_change_one_submit_only(sdk, api, js):
    await api.post(Q, {"name": udf_targets.QUEUE, "kind": "priority"})
    key = udf_targets.double.options(priority=7, idempotency_key="run-1", stop_grace_s=3)
    first = await asyncio.to_thread(key.submit, 1)
    again = await asyncio.to_thread(key.submit, 1)
    plain = await asyncio.to_thread(udf_targets.double.submit, 1)
    assert first.id == again.id != plain.id
    assert [(m.id, m.priority, m.stop_grace_s) for m in await stored(js)] == [
        (first.id, 7, 3),
        (plain.id, 0, 10),
    ]
    with pytest.raises(ValueError, match="idempotency_key 'run-1', which names one invocation"):
        key.map([1, 2])


async def test_api_refusals_raise_the_servers_error(sdk, api):
    with pytest.raises(errors.QueueNotFound, match="'sdk-tests' does not exist"):
        await asyncio.to_thread(udf_targets.double.submit, 1)
    await api.post(Q, {"name": udf_targets.QUEUE})
    await api.post(f"{Q}/{udf_targets.QUEUE}/drain")
    with pytest.raises(errors.WrongState):
        await asyncio.to_thread(udf_targets.double.submit, 1)


async def test_the_default_client_comes_from_the_environment(control_plane, queue, monkeypatch):
    monkeypatch.setenv("LAKESHORE_API", control_plane.api)
    monkeypatch.setenv("LAKESHORE_TOKEN", control_plane.admin_token)
    configure()
    try:
        inv = await asyncio.to_thread(udf_targets.double.submit, 2)
    finally:
        sync.close()
    assert inv.namespace == "default"


async def test_configure_with_settings(control_plane, queue):
    configure(settings=ClientSettings(api=control_plane.api, token=control_plane.admin_token))
    try:
        inv = await udf_targets.double.asubmit(3)
    finally:
        configure()
        sync.close()
    assert inv.queue == queue


async def test_a_plain_script_submits_and_exits_cleanly(
    control_plane, queue, js, register, tmp_path
):
    await register("w", queues=[queue])  # so the server has no warning to report
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import udf_targets

            print(udf_targets.double.submit(21).id)
            """
        )
    )
    env = {
        **os.environ,
        "LAKESHORE_API": control_plane.api,
        "LAKESHORE_TOKEN": control_plane.admin_token,
        "PYTHONPATH": str(Path(__file__).parent),
        "PYTHONWARNINGS": "error",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        env=env,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert err.decode() == ""
    assert [m.id for m in await stored(js)] == [out.decode().strip()]


def test_lakeshore_exports_the_sdk():
    assert set(lakeshore.__all__) >= {"udf", "Client", "Invocation", "RemoteError"}
    assert lakeshore.udf is udf and lakeshore.Client is Client
    assert issubclass(lakeshore.RemoteError, errors.LakeshoreError)


# ---- results: a real daemon runs the functions ------------------------------------------


@pytest.fixture
async def daemon(control_plane, queue, tmp_path) -> AsyncIterator[None]:
    """``lakeshore daemon run`` on the queue, as a subprocess (it can import ``udf_targets``)."""
    log = tmp_path / "daemon.log"
    async with daemon_process(control_plane, queue, "sdk-daemon", Path(__file__).parent, log):
        yield


async def test_result_returns_the_value(sdk, daemon):
    inv = await asyncio.to_thread(udf_targets.double.submit, 21)
    assert await asyncio.to_thread(inv.result, 60) == 42
    detail = await asyncio.to_thread(inv.status)
    assert (detail.state, detail.attempt, [a.outcome for a in detail.attempts]) == (
        "succeeded",
        1,
        ["succeeded"],
    )


async def test_aresult_and_map(sdk, daemon):
    invs = await asyncio.to_thread(udf_targets.pair.map, ["a", "b", "c"])
    assert [await i.aresult(timeout=60) for i in invs] == [["a", None], ["b", None], ["c", None]]
    inv = await udf_targets.adouble.asubmit(4)
    assert await inv.aresult(timeout=60) == 8


async def test_a_remote_exception_raises_remote_error_with_type_and_traceback(sdk, daemon):
    inv = await asyncio.to_thread(udf_targets.fail.submit, "boom")
    with pytest.raises(lakeshore.RemoteError) as caught:
        await asyncio.to_thread(inv.result, 60)
    err = caught.value
    assert (err.remote_type, err.remote_message, err.invocation_id) == (
        "builtins.ValueError",
        "boom",
        inv.id,
    )
    assert "in fail" in err.traceback and "raise ValueError(message)" in err.traceback
    assert err.message == f"invocation {inv.id} failed: builtins.ValueError: boom"
    assert err.__notes__ == ["remote traceback:\n" + err.traceback.rstrip("\n")]
    assert (await asyncio.to_thread(inv.status)).state == "failed"


async def test_result_times_out_while_nothing_runs_it(sdk, queue):
    inv = await asyncio.to_thread(udf_targets.double.submit, 1)
    with pytest.raises(TimeoutError, match=rf"invocation {inv.id} did not finish within 0.3s"):
        await inv.aresult(timeout=0.3)
    assert (await inv.astatus()).state == "pending"


async def test_a_cancelled_invocation_raises_job_cancelled(sdk, queue):
    inv = await asyncio.to_thread(udf_targets.double.submit, 1)
    assert (await inv.acancel()).state == "cancelled"
    with pytest.raises(JobCancelled, match=f"invocation {inv.id} was cancelled"):
        await inv.aresult(timeout=30)
    with pytest.raises(errors.Conflict):
        await inv.acancel()


async def test_an_invocation_handle_can_be_rebuilt_from_its_id(sdk, daemon):
    submitted = await udf_targets.double.asubmit(8)
    assert await Invocation(submitted.id).aresult(timeout=60) == 16


# ---- waiting: long-poll slices, against a result route that holds requests ----------------


class ResultRoute:
    """A real HTTP server whose result route holds each request for its ``wait_s`` and
    answers 202 (unfinished) until ``finish_after`` requests, then 200; the first
    ``unknown_for`` requests answer 404."""

    def __init__(self, *, finish_after: int = 10**6, unknown_for: int = 0, hold: bool = True):
        self.finish_after, self.unknown_for, self.hold = finish_after, unknown_for, hold
        self.waits: list[float] = []

    async def handle(self, request: web.Request) -> web.Response:
        wait_s = float(request.query.get("wait_s", "0"))
        self.waits.append(wait_s)
        job_id = request.match_info["id"]
        if len(self.waits) <= self.unknown_for:
            error = {"code": "not_found", "message": f"no job {job_id!r}"}
            return web.json_response({"error": error}, status=404)
        if len(self.waits) > self.finish_after:
            return web.json_response({"id": job_id, "ok": True, "value": 42})
        if self.hold:
            await asyncio.sleep(wait_s)  # the server side of a long poll
        job = {"id": job_id, "namespace": "default", "queue": "q", "state": "pending"}
        return web.json_response(job, status=202)


@pytest.fixture
async def result_route() -> AsyncIterator[tuple[ResultRoute, Client]]:
    route = ResultRoute()
    app = web.Application()
    app.router.add_get("/v1/namespaces/{ns}/jobs/{id}/result", route.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with Client(f"http://127.0.0.1:{port}", None, timeout_s=1.0) as client:
            yield route, client
    finally:
        await runner.cleanup()


async def test_waiting_long_polls_in_slices_shorter_than_the_request_timeout(result_route):
    route, client = result_route
    with pytest.raises(TimeoutError, match="did not finish within 1.2s .state pending"):
        await wait_result(client, "j", timeout_s=1.2)
    assert len(route.waits) == 3
    assert route.waits[:2] == [0.5, 0.5] and 0 <= route.waits[2] <= 0.2


async def test_waiting_returns_the_result_once_finished(result_route):
    route, client = result_route
    route.finish_after = 1
    result = await wait_result(client, "j", timeout_s=None)
    assert (result.ok, result.value, route.waits[0]) == (True, 42, 0.5)


async def test_a_server_that_does_not_hold_is_not_polled_in_a_tight_loop(result_route):
    route, client = result_route
    route.hold = False
    with pytest.raises(TimeoutError):
        await wait_result(client, "j", timeout_s=1.0)
    assert len(route.waits) <= 1 + 1.0 / MIN_POLL_S
