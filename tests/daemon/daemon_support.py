"""Helpers of the daemon tests: event log, bench, daemon pools, invocation specs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import nats.js.errors
from polling import eventually
from support import Api

from lakeshore import submission
from lakeshore.bus import codec, subjects
from lakeshore.daemon import DaemonSettings, Running, run_daemon
from lakeshore.model import (
    DaemonAccess,
    DaemonControl,
    EventBatch,
    EventType,
    InvocationEvent,
    Result,
)

NS = "default"
Q = "/v1/namespaces/default/queues"
W = "/v1/namespaces/default/workers"
J = "/v1/namespaces/default/jobs"
HERE = Path(__file__).parent
#: Bound of every wait in these tests that is not about a specific duration (seconds).
WAIT_S = 15.0


class EventLog:
    """Every lifecycle event of the namespace, in the order the daemons published them."""

    def __init__(self) -> None:
        self.events: list[InvocationEvent] = []
        self.batches = 0
        self._changed = asyncio.Condition()
        self._seen: set[str] = set()

    async def on_batch(self, msg: Any) -> None:
        # A publish retried after a lost acknowledgement reaches this plain subscriber
        # again (JetStream drops the copy by its Nats-Msg-Id; core NATS delivers both).
        msg_id = (msg.headers or {}).get("Nats-Msg-Id")
        if msg_id is not None:
            if msg_id in self._seen:
                return
            self._seen.add(msg_id)
        batch = codec.decode(msg.data, EventBatch)
        async with self._changed:
            self.batches += 1
            self.events.extend(batch.events)
            self._changed.notify_all()

    def of(self, type_: EventType, queue: str | None = None) -> list[InvocationEvent]:
        return [e for e in self.events if e.type is type_ and queue in (None, e.queue)]

    def for_id(self, invocation_id: str) -> list[EventType]:
        """The types of an invocation's events as its history records them: a claim that
        carries the submission's record makes its ``submitted`` event when none came
        before (the control plane leaves its own out behind such a claim); one each."""
        out: list[EventType] = []
        for e in self.events:
            if e.invocation_id != invocation_id:
                continue
            bare, made = submission.from_event(e)
            for ev in (made, bare):
                if ev is not None and not (ev.type is EventType.SUBMITTED and ev.type in out):
                    out.append(ev.type)
        return out

    async def wait_for(
        self, done: Callable[[EventLog], bool], timeout_s: float = WAIT_S
    ) -> list[InvocationEvent]:
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: done(self))
        return self.events

    async def wait_count(
        self, type_: EventType, count: int, queue: str | None = None, timeout_s: float = WAIT_S
    ) -> list[InvocationEvent]:
        await self.wait_for(lambda log: len(log.of(type_, queue)) >= count, timeout_s)
        return self.of(type_, queue)

    async def wait_final(self, invocation_id: str, timeout_s: float = WAIT_S) -> EventType:
        final = {EventType.SUCCEEDED, EventType.FAILED, EventType.CANCELLED}
        await self.wait_for(lambda log: bool(final & set(log.for_id(invocation_id))), timeout_s)
        return next(t for t in self.for_id(invocation_id) if t in final)


class Bench:
    """The NATS side of a test: submit invocations, read results and streams."""

    def __init__(self, nc: Any, api: Any) -> None:
        self.nc, self.js, self.api = nc, nc.jetstream(), api
        self.events = EventLog()

    async def queue(self, name: str, kind: str = "fifo") -> str:
        status, body = await self.api.post(Q, {"name": name, "kind": kind})
        assert status == 201, body
        return name

    async def submit(self, queue: str, *specs: dict[str, Any]) -> list[str]:
        """Submit through the API, as producers do; the ids in submission order."""
        status, body = await self.api.post(f"{Q}/{queue}/invocations", {"invocations": specs})
        assert status == 202, body
        return body["ids"]

    async def job_state(self, invocation_id: str, state: str, timeout_s: float = WAIT_S) -> None:
        """Wait until the control plane shows the job in ``state`` (its Recorder trails)."""

        async def job_state() -> str | None:
            return (await self.api.get(f"{J}/{invocation_id}"))[1].get("state")

        await eventually(
            job_state,
            until=lambda shown: shown == state,
            timeout_s=timeout_s,
            every_s=0.02,
            what=f"job {invocation_id} in state {state!r}",
        )

    async def result(self, invocation_id: str, epoch: int) -> Result:
        """Attempt ``epoch``'s result: a large one from ``LS_RESULTS``, a small one as the
        API answers it (its outcome event carried it)."""
        kv = await self.js.key_value(subjects.RESULTS_BUCKET)
        try:
            entry = await kv.get(subjects.result_key(NS, invocation_id, epoch))
        except nats.js.errors.KeyNotFoundError:
            status, body = await self.api.get(f"{J}/{invocation_id}/result?wait_s=30")
            assert status == 200, body
            result = msgspec.convert(body, Result)
            assert result.epoch == epoch, f"the accepted attempt is {result.epoch}, not {epoch}"
            return result
        return codec.decode(entry.value, Result)

    async def control(self, worker_id: str, order: DaemonControl) -> None:
        await self.nc.publish(subjects.daemon_control_subject(NS, worker_id), codec.encode(order))

    async def depth(self, queue: str) -> int:
        return (await self.js.stream_info(subjects.queue_stream(NS, queue))).state.messages

    async def drained(self, queue: str) -> None:
        """Wait until the queue's stream is empty: an outcome's event is stored before the
        daemon acks or terms the message, so the depth trails the event a moment."""
        await eventually(
            lambda: self.depth(queue),
            until=lambda depth: not depth,
            timeout_s=WAIT_S,
            every_s=0.01,
            what=f"queue {queue}'s stream empty",
        )


class InProcess:
    """One ``run_daemon`` task and its stop event."""

    def __init__(self, task: asyncio.Task[int], stop: asyncio.Event, running: Running) -> None:
        self.task, self.stop, self.running = task, stop, running

    @property
    def id(self) -> str:
        return self.running.worker.id

    async def retire(self, timeout_s: float = WAIT_S) -> int:
        self.stop.set()
        async with asyncio.timeout(timeout_s):
            return await self.task


async def join(api: Api, worker_id: str | None = None) -> DaemonAccess:
    """A daemon's NATS access, asked of the API as ``lakeshore daemon run`` does."""
    status, body = await api.post(f"/v1/namespaces/{NS}/daemons/join", {"id": worker_id})
    assert status == 200, body
    return msgspec.convert(body, DaemonAccess)


class DaemonPool:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.daemons: list[InProcess] = []

    async def settings(self, name: str, **overrides: Any) -> DaemonSettings:
        values: dict[str, Any] = {
            "access": await join(self.api),
            "name": name,
            "heartbeat_s": 0.2,
            "drain_timeout_s": 5.0,
            "request_timeout_s": 2.0,
        }
        return DaemonSettings(**{**values, **overrides})

    async def start(
        self, name: str, environ: dict[str, str] | None = None, **overrides: Any
    ) -> InProcess:
        stop = asyncio.Event()
        ready: asyncio.Future[Running] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            run_daemon(
                await self.settings(name, **overrides),
                stop,
                environ=os.environ if environ is None else environ,
                on_ready=ready.set_result,
            ),
            name=f"daemon {name}",
        )
        try:
            async with asyncio.timeout(WAIT_S):
                await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not ready.done():
                task.cancel()
        if task.done():
            raise AssertionError(f"daemon {name} ended before it was ready: {task.result()}")
        daemon = InProcess(task, stop, ready.result())
        self.daemons.append(daemon)
        return daemon

    async def close(self) -> None:
        for d in self.daemons:
            d.stop.set()
        if not self.daemons:
            return
        tasks = [d.task for d in self.daemons]
        done, pending = await asyncio.wait(tasks, timeout=WAIT_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                raise task.exception()


class DaemonProcess:
    """``python -m lakeshore.daemon`` as a child process; its output is kept."""

    def __init__(self, proc: asyncio.subprocess.Process, args: list[str]) -> None:
        self.proc = proc
        #: its command line, as ``ps`` shows it
        self.proc_args = args
        self.lines: list[str] = []
        self._seen = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            async with self._seen:
                self.lines.append(line.decode(errors="replace"))
                self._seen.notify_all()

    async def wait_line(self, text: str, timeout_s: float = WAIT_S) -> str:
        def found() -> bool:
            return any(text in line for line in self.lines) or self._reader.done()

        async with asyncio.timeout(timeout_s), self._seen:
            await self._seen.wait_for(found)
        for line in self.lines:
            if text in line:
                return line
        raise AssertionError(f"daemon exited without {text!r}:\n" + "".join(self.lines))

    async def wait(self, timeout_s: float = WAIT_S) -> int:
        async with asyncio.timeout(timeout_s):
            code = await self.proc.wait()
            await self._reader
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


class ProcessPool:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.procs: list[DaemonProcess] = []

    async def start(
        self,
        name: str,
        *args: str,
        url: str | None = None,
        ready: str = "registered as",
        token: str | None = None,
    ) -> DaemonProcess:
        """``LAKESHORE_TOKEN=T lakeshore daemon run --api URL`` (``url``: a NATS URL instead
        of the one the API names; ``token``: another than the admin's), the token in the
        environment as the README says (never on the command line, where ``ps`` shows it)."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        env.pop("LAKESHORE_NATS_URL", None)
        env["LAKESHORE_TOKEN"] = token or str(self.api.token)
        nats = ["--nats-url", url] if url else []
        argv = [
            sys.executable,
            "-m",
            "lakeshore",
            "daemon",
            "run",
            "--api",
            self.api.base,
            *nats,
            "--name",
            name,
            "--heartbeat-s",
            "0.2",
            *args,
        ]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        daemon = DaemonProcess(proc, argv)
        self.procs.append(daemon)
        await daemon.wait_line(ready)
        return daemon

    async def close(self) -> None:
        for d in self.procs:
            if d.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    d.proc.kill()
            with contextlib.suppress(TimeoutError):
                await d.wait()


def fn(name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """An invocation spec that runs ``daemon_jobs:<name>``."""
    return {"fn": f"daemon_jobs:{name}", "args": list(args), "kwargs": kwargs}


def command(*argv: str, **fields: Any) -> dict[str, Any]:
    return {"command": list(argv), **fields}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(pid: int, timeout_s: float = 5.0) -> None:
    """Wait until ``pid`` has died; the kernel finishes a SIGKILL asynchronously."""
    await eventually(
        lambda: not alive(pid), timeout_s=timeout_s, every_s=0.02, what=f"pid {pid} gone"
    )


async def wait_exists(path: Path, timeout_s: float = WAIT_S) -> None:
    """Wait until a job has created ``path`` (in its own process or thread)."""
    await eventually(path.exists, timeout_s=timeout_s, every_s=0.02, what=f"{path} created")


async def wait_pid(path: Path, timeout_s: float = WAIT_S) -> int:
    """Wait until a command has written its pid and a newline to ``path``."""
    text = await eventually(
        lambda: path.read_text() if path.exists() else None,
        until=lambda text: text is not None and text.endswith("\n"),
        timeout_s=timeout_s,
        every_s=0.02,
        what=f"a pid and a newline in {path}",
    )
    return int(text)
