"""The worker processes' wire and pipelined calls: calls answered in order, what each wrote
its own, a call queued behind a long run taken back, stops and crashes touching only the
call that runs. Real worker processes of a real :class:`Pool`; no daemon."""

from __future__ import annotations

import asyncio
import os
import pathlib
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st
from polling import eventually

from lakeshore.daemon import pool as pool_module
from lakeshore.daemon import worker_main
from lakeshore.daemon.pool import Pool, WorkerProcess
from lakeshore.daemon.runner import TAIL_BYTES, Capture
from lakeshore.daemon.worker_main import Call, Done

WAIT_S = 30.0


@pytest_asyncio.fixture
async def pool(monkeypatch) -> AsyncIterator[Pool]:
    # One core as far as the pool knows: its small runs queue on the busy worker rather
    # than start another (on any machine this test runs on).
    monkeypatch.setattr(pool_module, "_CORES", 1)
    p = Pool(dict(os.environ), size=2, max_runs=None)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
def nothing_asked_back(monkeypatch) -> None:
    """No queued call is asked back (``WITHDRAW_AFTER_S`` of a minute): the test says when
    the runs it holds end."""
    monkeypatch.setattr(pool_module, "WITHDRAW_AFTER_S", 60.0)


async def _run(
    p: Pool, fn: str, *args: object, grace_s: float = 5.0
) -> tuple[Done | None, Capture]:
    capture = Capture()
    # Each run its own mark: a stop or a crash here signals and kills whatever carries its
    # run's mark, on this machine (tests of other workers run beside this one).
    mark = f"wire-{uuid.uuid4().hex}"
    answer, _ = await p.run(
        f"daemon_jobs:{fn}", list(args), {}, env={}, run_env={}, mark=mark, grace_s=grace_s,
        capture=capture,
    )  # fmt: skip
    return answer, capture


async def _warm(p: Pool) -> WorkerProcess:
    """Small runs until the pool's mean is small (runs may be pipelined); its worker."""
    for _ in range(100):
        answer, _ = await _run(p, "add", 1, 2)
        assert answer is not None and answer.ok
        if p._run_s.value is not None and p._run_s.value < pool_module.PIPELINE_BELOW_S / 2:
            break
    [worker] = p._idle
    return worker


async def _outstanding(worker: WorkerProcess, n: int) -> None:
    await eventually(
        lambda: worker.outstanding, until=lambda k: k == n, timeout_s=WAIT_S, what=f"{n} calls held"
    )


async def test_calls_sent_back_to_back_are_answered_in_order_each_with_its_own_output(
    nothing_asked_back,
):
    # Nothing is asked back: on a loaded machine the first run (its module's import) may take
    # longer than WITHDRAW_AFTER_S, and the calls behind it would come back withdrawn.
    p = Pool(dict(os.environ), size=1, max_runs=None)
    worker = await p._spawn(())
    try:
        captures = [Capture() for _ in range(50)]
        # All sent before any is answered: the worker may read them in one piece.
        sent = [
            worker.send(Call(id=0, fn="daemon_jobs:says", args=[f"run {i}"], kwargs={}, env={}), c)
            for i, c in enumerate(captures)
        ]
        answers = await asyncio.gather(*(s.future for s in sent))
        assert [a.value for a in answers] == [f"run {i}" for i in range(50)]
        worker.output.drain()
        assert [c.text() for c in captures] == [f"run {i}\n" for i in range(50)]
        assert [c.stderr_text() for c in captures] == [f"run {i}\n" for i in range(50)]
    finally:
        await worker.close()
        await p.close()


async def test_small_runs_are_queued_on_a_busy_worker_and_run_there_in_order(
    pool, tmp_path, nothing_asked_back
):
    worker = await _warm(pool)
    gate = tmp_path / "gate"
    first = asyncio.create_task(_run(pool, "waits_for", str(gate)))
    await _outstanding(worker, 1)
    queued = [asyncio.create_task(_run(pool, "says", f"q{i}")) for i in range(3)]
    await _outstanding(worker, 4)  # pipelined: sent while the first runs
    gate.touch()
    answer, _ = await first
    assert answer is not None and answer.value == worker.pid
    results = await asyncio.gather(*queued)
    assert [(a.value, c.text()) for a, c in results] == [(f"q{i}", f"q{i}\n") for i in range(3)]
    assert pool.processes == [worker.pid]  # no worker was started for them


async def test_a_run_that_writes_more_than_its_pipes_hold_is_read_while_it_runs(pool):
    # The pipes (64 KiB each) are read while the run writes, or its worker would wait on a
    # full pipe for ever; what the capture keeps is the run's tail, its mark not in it.
    text = "x" * (300 * 1024)
    async with asyncio.timeout(WAIT_S):
        answer, capture = await _run(pool, "says", text)
    assert answer is not None and answer.ok
    tail = (text + "\n")[-TAIL_BYTES:]  # a capture keeps the tail
    assert capture.text() == tail and capture.stderr_text() == tail


@pytest.mark.parametrize("head", ["waits_for", "waits_in_a_process"])
async def test_a_call_queued_behind_a_long_run_is_taken_back_and_runs_elsewhere(
    pool, tmp_path, head
):
    # The long run sleeps in Python, or is blocked in a system call (waitpid): either way
    # the worker reads the withdraw at once.
    worker = await _warm(pool)
    gate = tmp_path / "gate"
    sent = worker.runs
    behind = tmp_path / "behind"
    # Started in this order, at once: the first takes the idle worker, the second is
    # queued behind it.
    first = asyncio.create_task(_run(pool, head, str(gate)))
    second = asyncio.create_task(_run(pool, "touches", str(behind)))
    answer, _ = await asyncio.wait_for(second, WAIT_S)
    # It was queued there, taken back, and ran while the long one still runs, elsewhere.
    assert worker.runs == sent + 2
    assert answer is not None and answer.ok and answer.value != worker.pid
    assert behind.exists()
    assert not first.done(), first.result()
    gate.touch()
    answer, _ = await first
    assert answer is not None and answer.value == worker.pid


async def test_a_queued_call_cancelled_never_runs_and_the_running_one_goes_on(
    pool, tmp_path, nothing_asked_back
):
    worker = await _warm(pool)
    gate = tmp_path / "gate"
    first = asyncio.create_task(_run(pool, "waits_for", str(gate)))
    await _outstanding(worker, 1)
    never = tmp_path / "never"
    queued = asyncio.create_task(_run(pool, "touches", str(never)))
    await _outstanding(worker, 2)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert worker.outstanding == 1 and worker.healthy
    gate.touch()
    answer, capture = await first
    assert answer is not None and answer.ok and capture.stopped is None
    assert not never.exists()
    answer, _ = await _run(pool, "add", 2, 2)  # the worker serves on
    assert answer is not None and answer.value == 4 and pool.processes == [worker.pid]


@pytest.mark.parametrize("how", ["stopped", "crashed"])
async def test_a_stop_or_a_crash_of_the_running_call_spares_the_queued_ones(
    pool, tmp_path, how, nothing_asked_back
):
    worker = await _warm(pool)
    gate = tmp_path / "gate"
    fn = "waits_for" if how == "stopped" else "dies_when"
    first = asyncio.create_task(_run(pool, fn, str(gate), grace_s=2.0))
    await _outstanding(worker, 1)
    queued = [asyncio.create_task(_run(pool, "says", f"q{i}")) for i in range(2)]
    await _outstanding(worker, 3)
    if how == "stopped":
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
    else:
        gate.touch()
        answer, _ = await first
        assert answer is None  # it died running it
    results = await asyncio.gather(*queued)
    # The queued ones never started there: they ran, whole, on another worker.
    assert [(a.ok, a.value, c.text()) for a, c in results] == [
        (True, f"q{i}", f"q{i}\n") for i in range(2)
    ]
    assert worker.pid not in pool.processes


@given(
    outputs=st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_a_pipes_bytes_go_to_the_run_that_wrote_them_however_the_reads_cut_them(
    outputs: list[bytes], cuts: list[int]
):
    # What each run wrote (NULs and starts of the mark among it), each followed by the
    # mark, read in pieces cut anywhere — inside a mark too.
    mark = worker_main.mark("0123456789abcdef0123456789abcdef")
    stream = b"".join(out + mark for out in outputs) + b"\0" + mark[:5]  # a partial at the end
    pipe = pool_module._Pipe(1, 3, mark, stderr=False)
    got: list[bytearray] = [bytearray() for _ in range(len(outputs) + 1)]
    captures = [Capture(sink=lambda _stream, chunk, b=b: b.extend(chunk)) for b in got]
    pipe.captures.extend(captures)
    at = 0
    for cut in sorted({min(c, len(stream)) for c in cuts}):
        pipe.feed(stream[at:cut])
        at = cut
    pipe.feed(stream[at:])
    pipe.flush()
    assert [bytes(b) for b in got] == [*outputs, b"\0" + mark[:5]]
    assert list(pipe.captures) == [captures[-1]]


def _devices(visible: str) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


async def _on(p: Pool, visible: str, fn: str = "sees_devices", *args: object) -> tuple[str, int]:
    answer, _ = await p.run(
        f"daemon_jobs:{fn}", list(args), {}, env={}, run_env={}, mark=f"wire-{uuid.uuid4().hex}",
        grace_s=5.0, capture=Capture(), devices=_devices(visible),
    )  # fmt: skip
    assert answer is not None and answer.ok, answer
    seen, pid = answer.value
    return seen, pid


async def test_a_worker_takes_each_runs_devices_until_a_run_loaded_cuda_in_it(pool, tmp_path):
    # No GPU here: the stand-in for CUDA's driver library is a copy of a shared library
    # the interpreter has, named as NVIDIA's (what the worker looks for in its maps).
    import _ctypes

    libcuda = tmp_path / "libcuda.so.1"
    libcuda.write_bytes(pathlib.Path(_ctypes.__file__).read_bytes())
    # One idle worker to begin with (a run that waits for a start may see a second begun).
    worker = await pool._spawn(())
    pool._idle.append(worker)
    first = worker.pid
    # Runs of other devices take the same worker, each seeing its own.
    seen = [await _on(pool, visible) for visible in ("0", "1", "", "0,1")]
    assert seen == [("0", first), ("1", first), ("", first), ("0,1", first)]
    # A run that loads CUDA pins its worker to its devices (2).
    assert await _on(pool, "2", "loads_cuda", str(libcuda)) == ("2", first)
    # Another device set now runs on another worker; the pinned one runs its own again.
    other, second = await _on(pool, "3")
    assert (other, second != first) == ("3", True)
    assert await _on(pool, "2") == ("2", first)
    assert await _on(pool, "3") == ("3", second)
    # A call naming other devices sent to the pinned worker is refused there, not run.
    [pinned] = [w for w in pool._idle if w.pid == first]
    assert pinned.pinned and pinned.devices == tuple(sorted(_devices("2").items()))
    call = Call(id=0, fn="daemon_jobs:sees_devices", args=[], kwargs={}, env={},
                devices=_devices("0"))  # fmt: skip
    refused = await pinned.send(call, Capture()).future
    assert isinstance(refused, worker_main.Pinned)
    assert refused.devices == _devices("2")


#: Put on a worker's path as ``sitecustomize``: the worker sleeps right after it says Ready,
#: so that a withdraw signal sent at that moment finds it in whatever state Ready left it.
SLOW_AFTER_READY = """
import socket, time
_sendall = socket.socket.sendall
def sendall(self, data, *args):
    done = _sendall(self, data, *args)
    if b"ready" in data:
        time.sleep(0.3)
    return done
socket.socket.sendall = sendall
"""


async def test_a_withdraw_signal_the_moment_a_worker_is_ready_does_not_kill_it(tmp_path):
    # The signal's default action is to end the process: a worker that said Ready before
    # it handled the signal died of a withdraw (a no-op ended "killed by signal 37").
    (tmp_path / "sitecustomize.py").write_text(SLOW_AFTER_READY)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = Pool(env, size=1, max_runs=None)
    worker = await p._spawn(())
    try:
        os.kill(worker.pid, worker_main.WITHDRAW_SIGNAL)
        call = Call(id=0, fn="daemon_jobs:says", args=["alive"], kwargs={}, env={})
        done = await worker.send(call, Capture()).future
        assert done is not None and done.value == "alive", (done, worker.returncode)
    finally:
        await worker.close()
        await p.close()
